// dsportal-gpu-notice: the portal's idle-GPU warnings (docs/gpus.md) as JupyterLab's own notifications, with
// "Keep it". A prebuilt JupyterLab extension written by hand, with no bundler: JupyterLab loads this file (its
// package.json's jupyterlab._build.load), initialises the container below with its share scope and asks it for
// "./extension", whose default export is the plugin. The plugin shares nothing of its own; it takes JupyterLab's
// Notification from that share scope.
//
// Every POLL_MS it asks the dashboard (same origin, behind the hub's proxy) for the user's warnings. Without the
// dashboard's login cookie yet, one visit of its GPUs page passes its OAuth (the hub's cookie is there: the user
// is in the lab), as a portal page would. "Keep it" posts the GPUs page's own form, with the XSRF token that page
// carries.
var _JUPYTERLAB;
(function () {
  "use strict";
  var NAME = "dsportal-gpu-notice";
  var POLL_MS = 60000;
  var shared = null;

  function sharedModule(name) {
    var versions = shared && shared[name];
    if (!versions || !Object.keys(versions).length) {
      return Promise.reject(new Error(NAME + ": JupyterLab shares no " + name));
    }
    var one = versions[Object.keys(versions)[0]];  // JupyterLab provides one version of its own packages
    return Promise.resolve(one.get()).then(function (factory) { return factory(); });
  }

  function portalUrl() {
    var node = document.getElementById("jupyter-config-data");
    var config = node ? JSON.parse(node.textContent) : {};
    return (config.hubPrefix || "/hub/").replace(/hub\/$/, "") + "services/portal/";
  }

  function minutes(seconds) {
    return Math.max(1, Math.round(seconds / 60)) + " min";
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

  function activate() {
    var portal = portalUrl(), shown = {}, loggedIn = false;
    document.body.setAttribute("data-dsportal-gpu-notice", "on");  // the tests' sign that it runs

    function page() {
      return fetch(portal + "gpus", {credentials: "same-origin"}).then(function (r) { return r.text(); });
    }
    function warnings() {
      var ask = function () {
        return fetch(portal + "api/gpus", {credentials: "same-origin", headers: {Accept: "application/json"}});
      };
      return ask().then(function (r) {
        if (r.status === 403 && !loggedIn) {  // not logged in to the dashboard yet: its OAuth, once
          loggedIn = true;
          return page().then(ask);
        }
        return r;
      }).then(function (r) { return r.ok ? r.json() : null; });
    }
    function keep(holder) {
      return page().then(function (html) {
        var token = /name="_xsrf" value="([^"]*)"/.exec(html);
        var body = new URLSearchParams({holder: holder, _xsrf: token ? token[1] : ""});
        // The page answers a keep with a redirect back to itself, an error with its error page: not followed.
        return fetch(portal + "gpus", {method: "POST", credentials: "same-origin", body: body, redirect: "manual"});
      }).then(function (r) { return r.type === "opaqueredirect" || r.ok; }, function () { return false; });
    }

    return sharedModule("@jupyterlab/apputils").then(function (apputils) {
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
    description: "The portal's idle-GPU warnings as notifications, with Keep it.",
    autoStart: true,
    activate: function () { activate(); }
  };
  _JUPYTERLAB = window._JUPYTERLAB = window._JUPYTERLAB || {};
  _JUPYTERLAB[NAME] = {
    init: function (scope) { shared = scope; return Promise.resolve(); },
    get: function (module) {
      if (module !== "./extension") {
        return Promise.reject(new Error("Module " + module + " does not exist in container " + NAME));
      }
      return Promise.resolve(function () { return {__esModule: true, "default": plugin}; });
    }
  };
})();
