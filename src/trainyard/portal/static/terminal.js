// A job page's terminal: xterm.js on the exec WebSocket (/api/v1/jobs/ID/tasks/ROLE/I/exec,
// api/routers/taskexec.py documents the protocol), a shell in the chosen running task. The
// page's session cookie signs it in (only its owner's pages offer it). Keys go as the
// terminal's bytes, so Ctrl-C reaches the remote terminal; a resize of the page resizes it.
(function () {
  "use strict";
  var box = document.getElementById("terminal");
  var select = document.getElementById("terminal-task");
  var open = document.getElementById("terminal-open");
  var close = document.getElementById("terminal-close");
  var status = document.getElementById("terminal-status");
  if (!box || typeof Terminal === "undefined" || typeof FitAddon === "undefined") { return; }
  var session = null;

  function say(text) { status.textContent = text; }

  function Session(task) {
    var parts = task.split("/");
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var url = scheme + location.host + "/api/v1/jobs/" + box.getAttribute("data-job") + "/tasks/" +
      encodeURIComponent(parts[0]) + "/" + encodeURIComponent(parts[1]) + "/exec";
    var self = this;
    this.term = new Terminal({ cursorBlink: true, convertEol: false, scrollback: 5000 });
    this.fit = new FitAddon.FitAddon();
    this.term.loadAddon(this.fit);
    box.hidden = false;
    this.term.open(box);
    this.fit.fit();
    this.encoder = new TextEncoder();
    this.socket = new WebSocket(url);
    this.socket.binaryType = "arraybuffer";
    this.ended = false;
    this.socket.onopen = function () {
      self.send(JSON.stringify({ argv: [], tty: true, rows: self.term.rows, cols: self.term.cols }));
      say("Connected to " + task + ". Type exit (or Ctrl-D) to end the shell.");
      self.term.focus();
    };
    this.socket.onmessage = function (message) {
      if (typeof message.data === "string") {
        var body = JSON.parse(message.data);
        if ("exit" in body) { self.end("The shell exited with status " + body.exit + "."); }
        if ("error" in body) { self.end(body.error); }
        return;
      }
      self.term.write(new Uint8Array(message.data, 1));  // the channel byte first
    };
    this.socket.onclose = function (event) {
      self.end(event.code === 1000 || event.code === 1005 ? "Disconnected." : "Disconnected (" + event.code + ").");
    };
    this.term.onData(function (data) { self.send(self.encoder.encode(data)); });
    this.term.onBinary(function (data) {
      var bytes = new Uint8Array(data.length);
      for (var i = 0; i < data.length; i++) { bytes[i] = data.charCodeAt(i) & 255; }
      self.send(bytes);
    });
    this.term.onResize(function (size) {
      self.send(JSON.stringify({ resize: { rows: size.rows, cols: size.cols } }));
    });
    this.onWindowResize = function () { self.fit.fit(); };
    window.addEventListener("resize", this.onWindowResize);
  }

  Session.prototype.send = function (data) {
    if (this.socket.readyState === WebSocket.OPEN) { this.socket.send(data); }
  };

  Session.prototype.end = function (text) {
    if (this.ended) { return; }
    this.ended = true;
    say(text);
    this.term.write("\r\n[" + text + "]\r\n");
    window.removeEventListener("resize", this.onWindowResize);
    if (this.socket.readyState === WebSocket.OPEN) { this.socket.close(); }
    open.hidden = false;
    close.hidden = true;
  };

  Session.prototype.dispose = function () {
    this.end("Closed.");
    this.term.dispose();
    box.hidden = true;
  };

  open.addEventListener("click", function () {
    if (session) { session.dispose(); }
    session = new Session(select.value);
    open.hidden = true;
    close.hidden = false;
  });
  close.addEventListener("click", function () {
    if (session) { session.dispose(); session = null; }
  });
})();
