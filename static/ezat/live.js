// Live request log: rows pushed over /ws/requests/?org=<id> are prepended to the table.
// Rows are built with textContent only, so nothing a caller sent (a model name) becomes markup.
(function () {
  "use strict";
  var table = document.getElementById("request-log");
  var status = document.getElementById("live-status");
  if (!table || !table.dataset.wsPath || !("WebSocket" in window)) return;
  var body = table.tBodies[0];
  var MAX_ROWS = Number(table.dataset.maxRows) || 50;
  var filters = {
    key: table.dataset.filterKey || "",
    model: (table.dataset.filterModel || "").toLowerCase(),
    status: table.dataset.filterStatus || ""
  };

  function setStatus(state, text) {
    if (!status) return;
    status.dataset.state = state;
    status.textContent = text;
  }

  function compact(n) {
    var units = [[1e9, "B"], [1e6, "M"], [1e3, "k"]];
    for (var i = 0; i < units.length; i++) {
      if (Math.abs(n) >= units[i][0]) {
        return (n / units[i][0]).toFixed(1).replace(/\.0$/, "") + units[i][1];
      }
    }
    return String(n);
  }

  function cell(text, className, title) {
    var td = document.createElement("td");
    if (className) td.className = className;
    if (title) td.title = title;
    if (text instanceof Node) td.appendChild(text); else td.textContent = text;
    return td;
  }

  function badge(text, className, title) {
    var span = document.createElement("span");
    span.className = "badge " + className;
    span.textContent = text;
    if (title) span.title = title;
    return span;
  }

  function matches(row) {
    // A row without key_id cannot be shown under a key filter: skip it rather than guess.
    if (filters.key && String(row.key_id) !== filters.key) return false;
    if (filters.status && row.status !== filters.status) return false;
    if (filters.model && String(row.model_id).toLowerCase() !== filters.model &&
        String(row.model_name).toLowerCase() !== filters.model) return false;
    return true;
  }

  function num(value) { return Number(value) || 0; }

  // The same cells, in the same order, as _request_rows.html (what a customer reads first:
  // time, model, status, tokens, cost), so a live row and a rendered row look alike.
  function render(row) {
    var tr = document.createElement("tr");
    tr.dataset.requestId = row.request_id;
    tr.className = "live-new";
    var when = document.createElement("span");
    var link = document.createElement("a");
    link.href = (table.dataset.detailBase || "/dashboard/requests/") + encodeURIComponent(row.request_id);
    var time = document.createElement("time");
    time.dateTime = row.created_at;
    time.textContent = new Date(row.created_at).toISOString().slice(0, 19).replace("T", " ");
    link.appendChild(time);
    when.appendChild(link);
    var rid = document.createElement("div");
    rid.className = "mono small reqid muted";
    rid.title = row.request_id;
    rid.textContent = row.request_id;
    when.appendChild(rid);
    tr.appendChild(cell(when, "col-time nowrap"));
    var model = document.createElement("span");
    model.textContent = row.model_name;
    if (String(row.model_name).toLowerCase() !== String(row.model_id).toLowerCase()) {
      var canonical = document.createElement("div");
      canonical.className = "muted small";
      canonical.textContent = row.model_id;
      model.appendChild(canonical);
    }
    if (row.requested_model) {
      model.appendChild(document.createTextNode(" "));
      model.appendChild(badge("fallback", "warn",
        "Asked for " + row.requested_model + "; " + row.model_id + " answered"));
    }
    tr.appendChild(cell(model, "col-model"));
    // The same status cell as _request_rows.html: errors show their HTTP status and message.
    var state = document.createElement("span");
    state.appendChild(badge(row.status === "ok" ? "ok" : row.status === "error" ?
      "error " + row.http_status : "client disconnected", "status-" + row.status));
    if (num(row.count) > 1) {
      state.appendChild(document.createTextNode(" "));
      state.appendChild(badge("×" + row.count, "warn", "Refusals of this key and reason in the same second"));
    }
    if (row.error_message) {
      var message = document.createElement("div");
      message.className = "small error-message";
      message.title = row.error_type || "";
      var text = String(row.error_message);
      message.textContent = text.length > 160 ? text.slice(0, 159) + "…" : text;
      state.appendChild(message);
    }
    tr.appendChild(cell(state, "col-status"));
    var input = num(row.input_tokens) + num(row.cache_read_tokens) + num(row.cache_write_tokens);
    tr.appendChild(cell(compact(input) + " / " + compact(num(row.output_tokens)), "num col-tokens",
      "input " + num(row.input_tokens) + " · output " + num(row.output_tokens) + " · cache read " +
      num(row.cache_read_tokens) + " · cache write " + num(row.cache_write_tokens)));
    // The server formats money and durations (ezat/money.py), so live rows and rendered rows
    // read the same; the fallbacks only cover a row from an older gateway process.
    var cost = Number(row.cost_usd);
    tr.appendChild(cell(row.cost || ("$" + (isFinite(cost) ? cost.toFixed(6) : row.cost_usd)), "num mono col-cost"));
    tr.appendChild(cell(row.latency || (num(row.latency_ms) + " ms"), "num nowrap col-latency", num(row.latency_ms) + " ms"));
    tr.appendChild(cell(row.key_prefix ? row.key_prefix + "…" : "deleted", "mono small col-key"));
    tr.appendChild(cell(row.output_exact ? badge("exact", "exact") :
      badge("estimated", "estimated", "The client disconnected before the end; output tokens are an estimate."), "col-output"));
    var deployment = document.createElement("span");
    deployment.textContent = row.deployment || "—";
    if (num(row.attempts) > 1) {
      deployment.appendChild(document.createTextNode(" "));
      deployment.appendChild(badge(row.attempts + " attempts", "warn"));
    }
    tr.appendChild(cell(deployment, "col-deploy"));
    return tr;
  }

  function onRow(row) {
    if (!row || !row.request_id || !matches(row)) return;
    var selector = 'tr[data-request-id="' + CSS.escape(row.request_id) + '"]';
    if (body.querySelector(selector)) return;  // already rendered (reconnect, reload race)
    var empty = body.querySelector("tr.empty-row");
    if (empty) empty.remove();
    body.insertBefore(render(row), body.firstChild);
    while (body.rows.length > MAX_ROWS) body.deleteRow(body.rows.length - 1);
    bumpCounts();
  }

  // Counts that the rows feed (issue 34: the rows grew, "N requests" did not): each element with
  // data-live-count holds its number and shows it with thousands separators, like intcomma.
  function bumpCounts() {
    var counters = document.querySelectorAll("[data-live-count]");
    for (var i = 0; i < counters.length; i++) {
      var n = num(counters[i].dataset.liveCount) + 1;
      counters[i].dataset.liveCount = String(n);
      var unit = counters[i].dataset.unit;
      counters[i].textContent = n.toLocaleString("en-US") + (unit ? " " + unit + (n === 1 ? "" : "s") : "");
    }
  }

  var delay = 1000;
  function connect() {
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + window.location.host + table.dataset.wsPath);
    socket.onopen = function () { delay = 1000; table.dataset.live = "open"; setStatus("live", "live"); };
    socket.onmessage = function (event) {
      try { onRow(JSON.parse(event.data)); } catch (e) { /* a bad frame must not stop the feed */ }
    };
    socket.onclose = function () {
      table.dataset.live = "closed";
      setStatus("offline", "reconnecting…");
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);  // back off so a down server is not hammered
    };
  }
  connect();
})();
