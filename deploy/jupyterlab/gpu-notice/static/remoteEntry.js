// dsportal-gpu-notice: the portal's idle-GPU warnings (docs/gpus.md) as JupyterLab's own notifications, with
// "Keep it", and the GPUs this server holds, in the status bar. A prebuilt JupyterLab extension written by hand, with
// no bundler: JupyterLab loads this file (its package.json's jupyterlab._build.load), initialises the container below
// with its share scope and asks it for "./extension", whose default export is the plugin. The plugin shares nothing
// of its own; it takes JupyterLab's Notification, the status bar's token and lumino's Widget from that share scope.
//
// Every POLL_MS it asks the lab's own server (<baseUrl>dsportal/gpus: portal.lab_gpus, which asks the dashboard with
// the server's token) for the user's warnings and for what their server's GPUs do now, node by node (busy, memory;
// "unknown" where a node's reader failed). It never asks the dashboard from the page: JupyterHub refuses a page's
// cookie request to another service without that service's XSRF token. "Keep it" posts to the server, with the
// server's XSRF token (its _xsrf cookie), as every request of JupyterLab's does.
var _JUPYTERLAB;
(function () {
  "use strict";
  var NAME = "dsportal-gpu-notice";
  var JUPYTERLAB = "@jupyterlab/application-top";  // the container JupyterLab registers its shared packages from
  var POLL_MS = 60000;  // once a minute: every open lab asks, and a refused ask is a line in the hub's log
  var shared = null;

  function sharedModule(name) {
    var versions = shared && shared[name];
    if (!versions || !Object.keys(versions).length) {
      return Promise.reject(new Error(NAME + ": JupyterLab shares no " + name));
    }
    // JupyterLab's own copy (its tokens and classes are the ones its plugins know), else the first an extension gave
    var keys = Object.keys(versions), own = keys.filter(function (v) { return versions[v].from === JUPYTERLAB; });
    var one = versions[own.length ? own[0] : keys[0]];
    return Promise.resolve(one.get()).then(function (factory) { return factory(); });
  }

  function pageConfig() {
    var node = document.getElementById("jupyter-config-data");
    return node ? JSON.parse(node.textContent) : {};
  }

  function portalUrl(config) {  // the portal's pages, for links: the user goes there, the script never asks
    return (config.hubPrefix || "/hub/").replace(/hub\/$/, "") + "services/portal/";
  }

  function xsrf() {  // the server's XSRF token, as JupyterLab's own requests send it (its _xsrf cookie)
    var found = /(?:^|;\s*)_xsrf=([^;]*)/.exec(document.cookie);
    return found ? decodeURIComponent(found[1]) : "";
  }

  function minutes(seconds) {
    return Math.max(1, Math.round(seconds / 60)) + " min";
  }

  function busy(g) {
    return typeof g.busy === "number" ? Math.round(g.busy) + " %" : "unknown";
  }

  function gpuLine(gpus) {  // the status bar's words: "GPU 37 %", "GPUs 37 %, unknown"; FAKE for the boxes' stand-in
    var fake = gpus.some(function (g) { return g.source === "standin"; }) ? " (FAKE)" : "";
    return (gpus.length > 1 ? "GPUs " : "GPU ") + gpus.map(busy).join(", ") + fake;
  }

  function gpuTitle(gpus) {  // its tooltip: each GPU, node by node
    return gpus.map(function (g) {
      var memory = typeof g.memory_used_mib === "number" ? ", " + g.memory_used_mib +
        (typeof g.memory_total_mib === "number" ? " of " + g.memory_total_mib : "") + " MiB" : "";
      return g.node + " GPU " + g.index + ": " + (typeof g.busy === "number" ? busy(g) + " busy" : "unknown" +
        (g.error ? " (" + g.error + ")" : "")) + memory +
        (g.source === "standin" ? " (FAKE GPU: busy is the stand-in's, from the server's CPU time)" : "");
    }).join("\n") + "\nClick for the portal's GPUs page.";
  }

  function words(w) {
    var idle = typeof w.idle_since === "number" && typeof w.warned_at === "number" ?
      " for " + minutes(w.warned_at - w.idle_since) : "";
    if (w.server) {
      return "Your JupyterLab server's GPUs have done nothing" + idle +
        (typeof w.left_s === "number" ? ": it stops in " + minutes(w.left_s) + " unless you keep it." : ".");
    }
    return "Job " + w.holder + "'s GPUs have done nothing" + idle + ": a rank that hangs, or an input that stalled?";
  }

  function activate(app, statusBar) {
    var config = pageConfig(), portal = portalUrl(config), shown = {}, gpusItem = null;
    var server = (config.baseUrl || "/") + "dsportal/gpus";
    document.body.setAttribute("data-dsportal-gpu-notice", "on");  // the tests' sign that it runs

    function warnings() {
      return fetch(server, {credentials: "same-origin", headers: {Accept: "application/json", "X-XSRFToken": xsrf()}})
        .then(function (r) { return r.ok ? r.json() : null; });
    }
    function keep(holder) {
      return fetch(server + "/keep", {method: "POST", credentials: "same-origin",
        body: JSON.stringify({holder: holder}),
        headers: {"Content-Type": "application/json", Accept: "application/json", "X-XSRFToken": xsrf()}})
        .then(function (r) { return r.ok; }, function () { return false; });
    }

    function showGpus(gpus) {
      if (!gpusItem) { return; }
      gpusItem.node.textContent = gpus.length ? gpuLine(gpus) : "";
      gpusItem.node.title = gpus.length ? gpuTitle(gpus) : "";
      gpusItem.setHidden(!gpus.length);
    }
    var statusItem = !statusBar ? Promise.resolve() : sharedModule("@lumino/widgets").then(function (widgets) {
      gpusItem = new widgets.Widget();
      gpusItem.addClass("dsportal-gpus");
      gpusItem.node.style.cursor = "pointer";
      gpusItem.node.style.padding = "0 5px";
      gpusItem.node.addEventListener("click", function () { window.open(portal + "gpus", "_blank", "noreferrer"); });
      gpusItem.setHidden(true);
      statusBar.registerStatusItem(NAME + ":gpus", {item: gpusItem, align: "left", rank: 100});
    }).catch(function (err) { console.warn(err); });

    return Promise.all([sharedModule("@jupyterlab/apputils"), statusItem]).then(function (loaded) {
      var apputils = loaded[0];
      var Notification = apputils.Notification;
      function show(w) {
        var key = w.holder + "@" + w.warned_at;
        if (shown[key]) { return; }
        var id = Notification.emit(words(w), "warning", {autoClose: false, actions: [
          {label: "Keep it", caption: "Keep its GPUs: the idle clock starts again", callback: function () {
            keep(w.holder).then(function (kept) {
              Notification.update({id: id, message: kept ? "Kept: its idle clock starts again." :
                "Not kept: open the portal's GPUs page.", type: kept ? "success" : "error", autoClose: 5000});
            });
          }},
          {label: "GPUs page", caption: portal + "gpus", displayType: "link", callback: function () {
            window.open(portal + "gpus", "_blank", "noreferrer");
          }}]});
        shown[key] = id;
      }
      function look() {
        return warnings().then(function (answer) {
          if (!answer) { return; }
          showGpus(Array.isArray(answer.server_gpus) ? answer.server_gpus : []);
          var now = {};
          answer.warnings.forEach(function (w) { now[w.holder + "@" + w.warned_at] = true; show(w); });
          Object.keys(shown).forEach(function (key) {  // kept, busy again or stopped: its notice goes
            if (!now[key]) { Notification.dismiss(shown[key]); delete shown[key]; }
          });
        }).catch(function () {});
      }
      look();
      setInterval(look, POLL_MS);
    }).catch(function (err) { console.warn(err); });
  }

  var plugin = {
    id: NAME + ":plugin",
    description: "The portal's idle-GPU warnings as notifications, with Keep it; the server's GPUs in the status bar.",
    autoStart: true,
    optional: [],  // the status bar's token, from the share scope (get, below): a lab without one shows no GPUs line
    activate: function (app, statusBar) { activate(app, statusBar || null); }
  };
  _JUPYTERLAB = window._JUPYTERLAB = window._JUPYTERLAB || {};
  _JUPYTERLAB[NAME] = {
    init: function (scope) { shared = scope; return Promise.resolve(); },
    get: function (module) {
      if (module !== "./extension") {
        return Promise.reject(new Error("Module " + module + " does not exist in container " + NAME));
      }
      var factory = function () { return {__esModule: true, "default": plugin}; };
      return sharedModule("@jupyterlab/statusbar").then(function (statusbar) {
        plugin.optional = [statusbar.IStatusBar];
        return factory;
      }, function () { return factory; });
    }
  };
})();
