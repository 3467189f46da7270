// Strict-Transport-Security on every answer configurable-http-proxy sends over TLS: the hub's pages, the
// dashboard's, the users' servers (JupyterLab, TensorBoard) and the proxy's own errors. Loaded into the proxy
// before it starts (`node --require <this file> configurable-http-proxy ...`: jupyterhub_config.py), because the
// proxy is where the portal's TLS ends and it has no option to add a header to its answers (--custom-header adds
// one to the requests it forwards). Never on plain HTTP (RFC 6797 8.1): not on the proxy's API port, nor on a
// proxy that serves no certificate. docs/security.md says what and why.
"use strict";

const http = require("http");

// portal.service.headers.HSTS says the same (a test compares them): a year, no includeSubDomains.
const HSTS = "max-age=31536000";

const writeHead = http.ServerResponse.prototype.writeHead;
http.ServerResponse.prototype.writeHead = function (...args) {
  // Every answer passes here: node's implicit headers (a bare write or end) call writeHead too.
  const socket = this.socket || (this.req && this.req.socket);
  if (socket && socket.encrypted && !this.headersSent) {
    this.setHeader("Strict-Transport-Security", HSTS);
  }
  return writeHead.apply(this, args);
};
