// A job's page: its usage charts (uPlot, from /jobs/ID/metrics.json) and its log, followed by
// byte offset (/jobs/ID/log) while the task may still write; "All tasks" (task "*") follows
// every task's log at once by the cursor /jobs/ID/log/all answers with (each line prefixed). Log lines are added as text
// nodes, never as HTML.
(function () {
  "use strict";
  var LOG_PAGE_BYTES = 256 * 1024;
  var LOG_KEEP_CHARS = 2 * 1024 * 1024;  // the most of a log the page holds; the rest: "Whole log"
  var LOG_FIRST_LINES = 2000;
  var LOG_POLL_MS = 1000;
  var CHART_REFRESH_MS = 10000;

  function live() {
    var state = document.getElementById("job-state");
    return !!(state && state.getAttribute("data-live"));
  }

  // --- the log ---------------------------------------------------------------------------
  var pre = document.getElementById("log");
  var select = document.getElementById("log-task");
  var whole = document.getElementById("log-whole");
  var status = document.getElementById("log-status");
  var follower = null;

  function Follower(task) {
    this.task = task;
    this.offset = null;  // null: start from the last lines
    this.attempt = pre.getAttribute("data-attempt");
    this.shownAttempt = null;
    this.stopped = false;
    this.decoder = new TextDecoder("utf-8");
    this.held = 0;
    this.cursor = null;  // all tasks: X-Log-Cursor of the last answer
  }

  function jobPath() { return "/jobs/" + pre.getAttribute("data-job"); }

  Follower.prototype.url = function () {
    if (this.task === "*") {
      var all = new URLSearchParams({ limit: String(LOG_PAGE_BYTES) });
      if (this.attempt !== null) { all.set("attempt", this.attempt); }
      if (this.cursor === null) { all.set("tail", String(LOG_FIRST_LINES)); } else { all.set("cursor", this.cursor); }
      return jobPath() + "/log/all?" + all.toString();
    }
    var params = new URLSearchParams({ task: this.task, limit: String(LOG_PAGE_BYTES) });
    if (this.attempt !== null) { params.set("attempt", this.attempt); }
    if (this.offset === null) { params.set("tail", String(LOG_FIRST_LINES)); } else { params.set("offset", String(this.offset)); }
    return "/jobs/" + pre.getAttribute("data-job") + "/log?" + params.toString();
  };

  Follower.prototype.append = function (text) {
    if (!text) { return; }
    // Keep following the end unless the reader has scrolled up to read something.
    var stick = this.justStarted || pre.scrollHeight - pre.scrollTop - pre.clientHeight < 40;
    pre.appendChild(document.createTextNode(text));
    this.held += text.length;
    while (this.held > LOG_KEEP_CHARS && pre.firstChild) {
      this.held -= pre.firstChild.textContent.length;
      pre.removeChild(pre.firstChild);
    }
    if (stick) { pre.scrollTop = pre.scrollHeight; }
  };

  Follower.prototype.poll = function () {
    var self = this;
    if (self.stopped) { return; }
    fetch(self.url(), { credentials: "same-origin", headers: { Accept: "text/plain" } })
      .then(function (response) {
        if (!response.ok) { throw new Error("the server answered " + response.status); }
        return response.arrayBuffer().then(function (body) { return [response.headers, body]; });
      })
      .then(function (answer) {
        if (self.stopped) { return; }
        var headers = answer[0], body = answer[1];
        var offset = parseInt(headers.get("X-Log-Offset") || "0", 10);
        var size = parseInt(headers.get("X-Log-Size") || "0", 10);
        var attempt = headers.get("X-Log-Attempt");
        if (attempt !== null && self.shownAttempt !== null && attempt !== self.shownAttempt) {
          // a new attempt (or run) began: its log starts afresh
          pre.textContent = "";
          self.held = 0;
          self.offset = null;
          self.cursor = null;
          self.shownAttempt = attempt;
          return self.later(0);
        }
        if (self.task === "*") {  // all tasks: whole prefixed lines, read on from the cursor
          self.shownAttempt = attempt;
          self.justStarted = self.cursor === null;
          self.append(self.decoder.decode(body, { stream: true }));
          self.cursor = headers.get("X-Log-Cursor") || "";
          if (headers.get("X-Log-Ended") === "true") {
            status.textContent = "every task has ended; this is the end of their logs";
            self.stopped = true;
            return;
          }
          status.textContent = attempt === null ? "waiting for the tasks to start…" : "following all tasks…";
          self.later(body.byteLength > 0 ? 0 : LOG_POLL_MS);
          return;
        }
        if (self.offset !== null && size < self.offset) {  // re-run in place: a new log
          pre.textContent = "";
          self.held = 0;
          offset = 0;
        }
        self.shownAttempt = attempt;
        self.justStarted = self.offset === null;
        self.append(self.decoder.decode(body, { stream: true }));
        self.offset = offset + body.byteLength;
        if (headers.get("X-Log-Ended") === "true") {
          status.textContent = "the task has ended; this is the end of its log";
          self.stopped = true;
          return;
        }
        status.textContent = attempt === null ? "waiting for the task to start…" : "following…";
        self.later(self.offset < size ? 0 : LOG_POLL_MS);
      })
      .catch(function (error) {
        status.textContent = "could not read the log: " + error.message + "; trying again";
        self.later(LOG_POLL_MS * 5);
      });
  };

  Follower.prototype.later = function (ms) {
    var self = this;
    window.setTimeout(function () { self.poll(); }, ms);
  };

  function followTask(task) {
    if (follower) { follower.stopped = true; }
    pre.textContent = "";
    status.textContent = "";
    var params = new URLSearchParams(task === "*" ? {} : { task: task });
    if (pre.getAttribute("data-attempt") !== null) { params.set("attempt", pre.getAttribute("data-attempt")); }
    var query = params.toString() ? "?" + params.toString() : "";
    whole.setAttribute("href", jobPath() + (task === "*" ? "/log/all/whole" : "/log/whole") + query);
    follower = new Follower(task);
    follower.poll();
  }

  if (pre && select) {
    select.addEventListener("change", function () { followTask(select.value); });
    followTask(select.value);
  }

  // --- the charts ------------------------------------------------------------------------
  var charts = document.getElementById("charts");
  var chartStatus = document.getElementById("charts-status");
  var drawn = {};
  if (charts) { charts.plots = drawn; }  // field -> {plot}: what a browser test reads the scales of
  var COLOURS = ["#2f6fde", "#1b8a4b", "#c92a2a", "#b7791f", "#7c3aed", "#0e7490", "#be185d", "#4d7c0f"];

  function series(metrics, field) {
    // uPlot wants one x array: the union of the tasks' times, each task's values aligned on it.
    var times = {};
    metrics.tasks.forEach(function (task) {
      task.points.forEach(function (p) { times[Date.parse(p.at) / 1000] = true; });
    });
    var xs = Object.keys(times).map(Number).sort(function (a, b) { return a - b; });
    var index = {};
    xs.forEach(function (x, i) { index[x] = i; });
    var data = [xs];
    metrics.tasks.forEach(function (task) {
      var ys = xs.map(function () { return null; });
      task.points.forEach(function (p) { ys[index[Date.parse(p.at) / 1000]] = p[field]; });
      data.push(ys);
    });
    return data;
  }

  // uPlot widens a range whose ends meet by their magnitude: one sample (epoch seconds, or a
  // value of 0) would span years, or 0-100 cores. The time axis is the job's window (from its
  // start until it ended, or now), and a value axis starts at 0 and reaches past its largest.
  // The window alone, never uPlot's min and max: for a single sample uPlot widens those itself
  // (its max a thousand days on); the samples are fetched for this window (since, until).
  function timeRange() {
    var since = Date.parse(charts.getAttribute("data-since")) / 1000;
    var until = charts.getAttribute("data-until") ? Date.parse(charts.getAttribute("data-until")) / 1000
                                                  : Date.now() / 1000;
    return [since, until];
  }

  function valueRange(u, min, max) {
    return [0, max == null || max <= 0 ? 1 : max * 1.1];
  }

  function draw(metrics) {
    var width = Math.max(280, Math.floor((charts.clientWidth - 32) / 3));
    charts.querySelectorAll(".chart").forEach(function (box) {
      var field = box.getAttribute("data-field");
      var data = series(metrics, field);
      var key = field + ":" + metrics.tasks.map(function (t) { return t.role + "/" + t.index; }).join(",");
      if (drawn[field] && drawn[field].key === key) {
        drawn[field].plot.setData(data);
        return;
      }
      if (drawn[field]) { drawn[field].plot.destroy(); }
      var opts = {
        width: width, height: 180,
        series: [{}].concat(metrics.tasks.map(function (task, i) {
          return { label: task.role + "/" + task.index, stroke: COLOURS[i % COLOURS.length], width: 1.5, spanGaps: false };
        })),
        axes: [{}, { size: 50 }],
        scales: { x: { time: true, range: timeRange }, y: { range: field === "gpuUtilPct" ? [0, 100] : valueRange } },
        legend: { live: true },
      };
      drawn[field] = { key: key, plot: new window.uPlot(opts, data, box) };
    });
    var measured = metrics.tasks.some(function (t) { return t.points.length > 0; });
    chartStatus.textContent = measured ? "" : charts.getAttribute("data-empty");
  }

  function loadCharts() {
    var params = new URLSearchParams({ since: charts.getAttribute("data-since") });
    if (charts.getAttribute("data-until")) { params.set("until", charts.getAttribute("data-until")); }
    fetch("/jobs/" + charts.getAttribute("data-job") + "/metrics.json?" + params.toString(),
          { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) { throw new Error("the server answered " + response.status); }
        return response.json();
      })
      .then(draw)
      .catch(function (error) { chartStatus.textContent = "could not read the figures: " + error.message; })
      .then(function () { if (live()) { window.setTimeout(loadCharts, CHART_REFRESH_MS); } });
  }

  if (charts && window.uPlot) { loadCharts(); }
})();
