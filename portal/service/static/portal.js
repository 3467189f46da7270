// The dashboard's live parts, without a page reload: the jobs list's rows and one job's figures and log are
// fetched again every poll period (the page's data-poll-s) while the tab is visible; the submit form's summary
// line follows its fields; a job that ends is announced by a browser notification, if the user asked for them.
// Pages work without it.
"use strict";

(function () {
  // The hub's OAuth takes a cookie from a script's request only with the XSRF token beside it. The token is read
  // at each request: this file loads in the page's <head>, before the hub's page defines window.jhdata.
  // A refused request is not followed to the hub's login (a script cannot log in; each round would make a new
  // OAuth token and end in "too many redirects"): the page stops its live updates and says to reload it.
  function ask() {
    return {credentials: "same-origin", redirect: "manual",
            headers: {"X-XSRFToken": (window.jhdata || {}).xsrf_token || ""}};
  }
  var stopped = false;

  function stop() {
    stopped = true;
    var note = document.getElementById("live-stopped");
    if (note) { note.hidden = false; }
  }

  // The period is the page's, then what the last answer's X-Poll-S said: the dashboard lengthens it as more pages
  // are open (portal.service.pace), and shortens it again.
  var period = {seconds: 0};
  function follow(r) {
    var next = Number(r.headers.get("X-Poll-S"));
    if (next > 0) { period.seconds = next; }
  }

  function every(seconds, fn) {
    period.seconds = seconds;
    function tick() {
      if (stopped) { return; }
      var done = document.hidden ? Promise.resolve() : fn();
      Promise.resolve(done).catch(function () {}).then(function () { setTimeout(tick, period.seconds * 1000); });
    }
    setTimeout(tick, period.seconds * 1000);
  }

  // The answer's text, or null when it is refused or fails; `after(response)` sees its headers first.
  function fetchText(url, after) {
    return fetch(url, ask()).then(function (r) {
      if (r.type === "opaqueredirect") { stop(); return null; }
      if (!r.ok) { return null; }
      follow(r);
      if (after) { after(r); }
      return r.text();
    });
  }

  // Where focus is, in words that find the same control in freshly rendered HTML: its id, else its link.
  function focusKey(box) {
    var el = document.activeElement;
    if (!el || !box.contains(el)) { return null; }
    if (el.id) { return "#" + CSS.escape(el.id); }
    var href = el.getAttribute("href");
    return href ? el.tagName.toLowerCase() + "[href=\"" + CSS.escape(href) + "\"]" : null;
  }

  // What an answer says, without the XSRF token of its cancel forms: the server signs that with the time of each
  // answer, so two answers a second apart always differ there.
  function withoutToken(html) {
    return html.replace(/(name="_xsrf" value=")[^"]*"/g, "$1\"").trim();
  }

  // The jobs list: its rows (and the usage panel) as the server renders them, put in only when they changed, and
  // with focus kept on the same control (a keyboard user is not sent back to the top every refresh).
  function followList(live) {
    every(Number(live.dataset.pollS), function () {
      return fetchText(live.dataset.rowsUrl).then(function (html) {
        if (html === null) { return; }
        var parsed = document.createElement("template");
        parsed.innerHTML = html;  // both sides as the browser writes them out
        if (withoutToken(parsed.innerHTML) === withoutToken(live.innerHTML)) { return; }
        var key = focusKey(live);
        live.innerHTML = html;
        var again = key && live.querySelector(key);
        if (again) { again.focus(); }
      });
    });
  }

  // One job: its figures until its state changes, then one reload so that the actions and panels match it. An
  // AUROC table the reader opened (or closed) stays so; the log's hidden-warnings count follows the log.
  function followJob(job) {
    var shown = job.dataset.state;
    var logBox = document.getElementById("log");
    var showAll = document.getElementById("show-framework");
    var asked = 0;  // the newest log request: an older answer arriving late is dropped
    function refreshLog() {
      var mine = ++asked;
      var all = showAll && showAll.checked;
      var url = job.dataset.logUrl + (all ? "&framework=1" : "");
      return fetchText(url, function (r) {
        var hidden = r.headers.get("X-Log-Hidden");
        var note = document.getElementById("log-hidden-note");
        if (mine === asked && hidden !== null && note) {
          document.getElementById("log-hidden").textContent = hidden;
          note.hidden = hidden === "0";
        }
      }).then(function (text) { if (text !== null && mine === asked) { logBox.textContent = text; } });
    }
    if (showAll) { showAll.addEventListener("change", refreshLog); }
    if (!job.dataset.live) { return; }
    var last = null;
    every(Number(job.dataset.pollS), function () {
      return fetchText(job.dataset.figuresUrl).then(function (html) {
        if (html === null) { return; }
        if (html !== last) {
          last = html;
          var next = document.createElement("div");
          next.innerHTML = html;
          var figures = next.querySelector("#figures");
          if (figures && figures.dataset.state !== shown) { window.location.reload(); return; }
          var now = document.getElementById("figures");
          if (figures && now) {
            var fresh = figures.querySelectorAll("details");
            now.querySelectorAll("details").forEach(function (was, i) { if (fresh[i]) { fresh[i].open = was.open; } });
            now.replaceWith(figures);
          }
        }
        return refreshLog();
      });
    });
  }

  // The submit form's one-line sum of the request, as portal.service.submit_form.request_summary writes it, kept in
  // step with the fields as they are edited; left as it was while a field it needs is not a value.
  function plural(count, word) { return count + " " + word + (count === 1 ? "" : "s"); }

  function requestSummary(form, line) {
    var whole = function (name) {
      var text = (form.elements[name] || {}).value || "";
      return /^\s*\d+\s*$/.test(text) ? parseInt(text, 10) : null;
    };
    var nodes = whole("nodes"), gpus = whole("gpus_per_node"), cpus = whole("cpus_per_task"),
      memory = whole("memory_gb");
    var wall = /^\s*(\d{1,3}):([0-5]\d):([0-5]\d)\s*$/.exec((form.elements.time_limit || {}).value || "");
    var kind = form.querySelector("input[name=kind]:checked"), sweep = kind !== null && kind.value === "sweep";
    var trials = sweep ? whole("sweep_trials") : 1;
    if (nodes === null || gpus === null || cpus === null || memory === null || !wall || trials === null) {
      return null;
    }
    var minutes = parseInt(wall[1], 10) * 60 + parseInt(wall[2], 10) + (parseInt(wall[3], 10) ? 1 : 0);
    var hours = Math.floor(minutes / 60), rest = minutes % 60;
    var limit = [hours ? hours + " h" : "", rest ? rest + " min" : ""].filter(Boolean).join(" ") || "0 min";
    var cost = gpus > 0 ? ", so at most " + gpuHours(nodes * gpus * minutes * trials) + " GPU-hours" +
      (sweep ? " for " + plural(trials, "trial") : "") : "";
    var inUse = parseInt(line.dataset.gpusInUse, 10);
    return plural(nodes, "node") + " x " + plural(gpus, "GPU") + ", " + (nodes * Math.max(1, gpus) * cpus) +
      " CPUs and " + (nodes * memory) + " GB in all, at most " + limit + (sweep ? " a trial" : "") + cost + "; " +
      (nodes * gpus) + " of your " + line.dataset.gpuQuota + " GPUs" + (inUse ? " (" + inUse + " in use now)" : "") +
      (line.dataset.budget ? "; " + line.dataset.budget : "");  // the weekly GPU-hours left, as the page said it
  }

  function gpuHours(gpuMinutes) {  // as portal.records.budget.gpu_hours: to the hundredth, rounded half up, no trailing zeros
    var hundredths = Math.floor((gpuMinutes * 100 + 30) / 60), part = hundredths % 100;
    var whole = (hundredths - part) / 100;
    return part ? (whole + "." + (part < 10 ? "0" : "") + part).replace(/0$/, "") : String(whole);
  }

  function followForm(form, line) {
    form.addEventListener("input", function () {
      var text = requestSummary(form, line);
      if (text !== null) { line.textContent = text; }
    });
  }

  // A browser notification when one of the user's jobs ends while any portal page is open. The browser is asked
  // only when the user clicks the toggle, never on page load. Then the user's jobs are read every poll period,
  // in a background tab too. Each job's last state is kept in localStorage, which the portal's pages and tabs
  // share: a job is announced once, when a page that saw it unended sees it ended. The notification names the
  // job, its state and its best mean AUROC, and a click on it opens the job's page.
  function notifyWhenJobsEnd(button) {
    if (!("Notification" in window) || !window.localStorage) { return; }  // the toggle stays hidden
    if (window.isSecureContext === false) {  // browsers give notifications only to https (and localhost)
      button.hidden = false;
      button.disabled = true;
      button.textContent = "Notifications need this portal on https";
      return;
    }
    var user = button.dataset.user, ended = button.dataset.ended.split(" ");
    var onKey = "dsportal-notify:" + user, statesKey = "dsportal-job-states:" + user;
    function on() { return localStorage.getItem(onKey) === "on" && Notification.permission === "granted"; }
    function show(blocked) {
      button.setAttribute("aria-pressed", on() ? "true" : "false");
      button.textContent = blocked ? "Notifications are blocked in this browser's settings" :
        on() ? "Notifying when a job ends or GPUs sit idle (turn off)" :
        "Notify me when a job ends or GPUs sit idle";
    }
    function announce(job) {
      var auroc = typeof job.best_mean_auroc === "number" ?
        "best mean AUROC " + job.best_mean_auroc.toFixed(3) : "no mean AUROC recorded";
      var note = new Notification("Job " + job.id + " " + job.state, {
        body: (job.spec && job.spec.model ? job.spec.model + ", " : "") + auroc + ". Click to open its page.",
        tag: "dsportal-job-" + job.id});
      note.onclick = function () { window.open(job.links.page, "_blank"); note.close(); };
    }
    function look() {
      return fetchText(button.dataset.jobsUrl).then(function (text) {
        if (text === null || !on()) { return; }
        var before = JSON.parse(localStorage.getItem(statesKey) || "null"), now = {};
        JSON.parse(text).jobs.forEach(function (job) {
          if (job.user !== user) { return; }  // an admin's list holds everyone's: only their own are announced
          now[job.id] = job.state;
          var was = before ? before[job.id] : undefined;
          if (was !== undefined && ended.indexOf(was) < 0 && ended.indexOf(job.state) >= 0) { announce(job); }
        });
        localStorage.setItem(statesKey, JSON.stringify(now));
      });
    }
    // The user's idle-GPU warnings too (portal.service.gpu_pages): each announced once, by holder and warning
    // time; a click opens the GPUs page with its "Keep it".
    var warnedKey = "dsportal-gpu-warned:" + user;
    function lookAtGpus() {
      return fetchText(button.dataset.gpusUrl).then(function (text) {
        if (text === null || !on()) { return; }
        var before = JSON.parse(localStorage.getItem(warnedKey) || "[]"), now = [];
        JSON.parse(text).warnings.forEach(function (w) {
          var key = w.holder + "@" + w.warned_at;
          now.push(key);
          if (before.indexOf(key) >= 0) { return; }
          var left = typeof w.left_s === "number" ? Math.round(w.left_s / 60) + " min" : "a while";
          var note = new Notification(w.server ? "Your JupyterLab server's GPUs are idle" :
            "Job " + w.holder + "'s GPUs are idle", {
            body: w.server ? "It stops in " + left + " unless you keep it. Click to keep it." :
              "A rank that hangs, or an input that stalled? Click to see.", tag: "dsportal-gpu-" + key});
          note.onclick = function () { window.open(button.dataset.gpusPage, "_blank"); note.close(); };
        });
        localStorage.setItem(warnedKey, JSON.stringify(now));
      });
    }
    function tick() {
      if (stopped) { return; }
      Promise.resolve(on() ? look().then(lookAtGpus) : null).catch(function () {}).then(function () {
        setTimeout(tick, Number(button.dataset.pollS) * 1000);
      });
    }
    button.hidden = false;
    show(false);
    button.addEventListener("click", function () {
      if (on()) { localStorage.removeItem(onKey); show(false); return; }
      Notification.requestPermission().then(function (answer) {
        if (answer === "granted") { localStorage.setItem(onKey, "on"); localStorage.removeItem(statesKey); }
        show(answer === "denied");
        if (answer === "granted") { look(); }
      });
    });
    tick();
  }

  // The submit form's sweep fields: shown and sent only while "Sweep" is chosen (without script they are always
  // shown, and the server ignores them for a single run).
  function followKind(form, fields) {
    function show() {
      var sweep = form.querySelector("input[name=kind]:checked");
      var on = sweep !== null && sweep.value === "sweep";
      fields.hidden = !on;
      fields.disabled = !on;
    }
    form.querySelectorAll("input[name=kind]").forEach(function (radio) { radio.addEventListener("change", show); });
    show();
  }

  // The submit form's program fields: only the chosen program's fieldset is shown and sent (without script, the
  // program the page was made with keeps its own; another program chosen takes its defaults).
  function followProgram(form, select) {
    function show() {
      form.querySelectorAll("fieldset.program-fields").forEach(function (set) {
        var on = set.dataset.program === select.value;
        set.hidden = !on;
        set.disabled = !on;
      });
    }
    select.addEventListener("change", show);
    show();
  }

  // TensorBoard's page takes the charts it shows when it loads: loaded before the run has written them (a job just
  // started, or one that ended within TensorBoard's last read of its files), it shows the time series as inactive,
  // or some of the charts only, and never looks again. While the panel may be missing charts, ask TensorBoard's own
  // server (the same origin) which of the panel's tags its runs have; when there are more than when the panel
  // loaded, load the panel again.
  function followPanel(frame) {
    var address = new URL(frame.src, location.href), params = address.searchParams;
    var runs = new RegExp(params.get("runFilter") || ""), tags = new RegExp(params.get("tagFilter") || "");
    var listing = new URL("data/plugin/scalars/tags", address.href.split(/[?#]/)[0]);
    var tries = 0, shown = -1, lookS = parseFloat(frame.dataset.lookS) || PANEL_LOOK_S;
    function count(answer) {  // {run: {tag: ...}}: the panel's runs' tags that the panel's filter keeps
      var found = {};
      Object.keys(answer || {}).forEach(function (run) {
        if (!runs.test(run)) { return; }
        Object.keys(answer[run]).forEach(function (tag) { if (tags.test(tag)) { found[tag] = true; } });
      });
      return Object.keys(found).length;
    }
    function look() {
      if (tries++ >= PANEL_TRIES) { return; }
      fetch(listing, {credentials: "same-origin", redirect: "manual"}).then(function (r) {
        return r.ok ? r.json() : null;
      }).then(function (answer) {
        var now = count(answer);
        if (shown >= 0 && now > shown) { reload(frame); }  // the first look is what the panel loaded with
        shown = Math.max(shown, now);
      }).catch(function () {}).then(function () { setTimeout(look, lookS * 1000); });
    }
    look();
  }
  // The same src again would only move to its #fragment: the frame's own page (same origin) is reloaded.
  function reload(frame) {
    try {
      frame.contentWindow.location.reload();
    } catch (e) {  // not the same origin after all: a new load of the same address
      var src = frame.src;
      frame.src = "about:blank";
      frame.src = src;
    }
  }
  var PANEL_LOOK_S = 5, PANEL_TRIES = 120;  // TensorBoard reads the files every 5 s; a run's first epoch may take
                                            // minutes: up to 10 of them

  document.addEventListener("DOMContentLoaded", function () {
    var panel = document.querySelector("iframe.tensorboard");
    if (panel) { followPanel(panel); }
    var toggle = document.getElementById("notify-toggle");
    if (toggle) { notifyWhenJobsEnd(toggle); }
    var live = document.getElementById("live-jobs");
    if (live) { followList(live); }
    var job = document.getElementById("job");
    if (job) { followJob(job); }
    var form = document.getElementById("submit_form"), line = document.getElementById("request-summary");
    if (form && line) { followForm(form, line); }
    var sweepFields = document.getElementById("sweep-fields");
    if (form && sweepFields) { followKind(form, sweepFields); }
    var program = document.getElementById("template");
    if (form && program) { followProgram(form, program); }
  });
})();
