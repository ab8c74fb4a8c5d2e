/* dtq admin: live updates over the event websocket. The pages work without this script;
   it only keeps them current. Protocol: the server sends {type: "events", events, last_id,
   gap}; we reconnect with backoff and pass the last id we saw, so nothing is missed. */
(function () {
  "use strict";
  var status = document.getElementById("dtq-live");
  if (!status || !window.WebSocket) { return; }
  var data = status.dataset;
  var lastId = data.lastId || "";
  var failures = 0;
  var received = 0;
  var refreshTimer = null;
  var lastRefresh = 0;
  var MAX_EVENTS = 50;

  function setStatus(state, text) {
    status.dataset.state = state;
    status.className = "dtq-live " + (state === "live" ? "on" : "off");
    status.textContent = text;
  }

  function socketUrl() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var query = lastId ? "?last_id=" + encodeURIComponent(lastId) : "";
    return scheme + location.host + data.wsPath + query;
  }

  function connect() {
    setStatus("connecting", "connecting…");
    var ws = new WebSocket(socketUrl());
    ws.onopen = function () { failures = 0; setStatus("live", "live"); };
    ws.onmessage = function (message) { receive(JSON.parse(message.data)); };
    ws.onclose = function () {
      // Exponential backoff with jitter, capped: a restarting server is not stormed.
      var delay = Math.min(15000, 500 * Math.pow(2, failures)) * (0.5 + Math.random() / 2);
      failures += 1;
      setStatus("reconnecting", "reconnecting in " + Math.ceil(delay / 1000) + " s");
      setTimeout(connect, delay);
    };
  }

  function receive(msg) {
    if (msg.type !== "events") { return; }
    if (msg.last_id) { lastId = msg.last_id; status.dataset.lastId = lastId; }
    if (msg.gap) { scheduleRefresh(true); }
    msg.events.forEach(handle);
  }

  function handle(event) {
    received += 1;
    status.dataset.received = String(received);
    var on = data.refreshOn;
    if (on && (on === "*" || on === event.task || on === event.workflow)) { scheduleRefresh(false); }
    if (event.task) { updateRows(event); }
    addEvent(event);
  }

  function updateRows(event) {
    var rows = document.querySelectorAll('tr[data-task="' + CSS.escape(event.task) + '"]');
    rows.forEach(function (row) {
      var state = row.querySelector('[data-field="state"]');
      if (state && event.state) {
        var span = document.createElement("span");
        span.className = "dtq-state dtq-" + event.state.toLowerCase();
        span.textContent = event.state;
        state.replaceChildren(span);
      }
      var progress = row.querySelector('[data-field="progress"]');
      if (progress && event.progress) { showProgress(progress, event.progress); }
      var attempt = row.querySelector('[data-field="attempt"]');
      if (attempt && event.attempt) {
        attempt.textContent = attempt.textContent.replace(/^\s*\d+/, String(event.attempt));
      }
      row.classList.remove("dtq-flash");
      void row.offsetWidth;  // restart the animation
      row.classList.add("dtq-flash");
    });
  }

  function showProgress(cell, p) {
    var bar = document.createElement("progress");
    bar.className = "dtq-progress";
    bar.max = 1;
    bar.value = Number(p.fraction) || 0;
    var label = document.createElement("span");
    label.className = "dtq-progress-text";
    label.textContent = Math.round(bar.value * 100) + "%" + (p.message ? " · " + p.message : "");
    cell.replaceChildren(bar, " ", label);
  }

  function addEvent(event) {
    var list = document.getElementById("dtq-events");
    if (!list) { return; }
    var empty = list.querySelector(".dtq-empty");
    if (empty) { empty.remove(); }
    var item = document.createElement("li");
    item.dataset.eventId = event.id || "";
    var time = document.createElement("time");
    time.textContent = new Date(event.ts || Date.now()).toLocaleTimeString([], { hour12: false });
    var kind = document.createElement("span");
    kind.className = "dtq-state dtq-" + String(event.state || "").toLowerCase();
    kind.textContent = event.type;
    item.append(time, " ", kind, " ");
    if (event.task) {
      var link = document.createElement("a");
      link.href = data.taskUrl.replace("__task__", encodeURIComponent(event.task));
      link.textContent = event.task;
      item.append(link, " ");
    }
    var where = document.createElement("span");
    where.className = "dtq-muted";
    where.textContent = (event.queue || "") + (event.attempt ? " · attempt " + event.attempt : "");
    item.append(where);
    list.prepend(item);
    while (list.children.length > MAX_EVENTS) { list.lastElementChild.remove(); }
  }

  function scheduleRefresh(now) {
    if (!data.refresh) {
      if (now) { setStatus("stale", "missed events: reload the page"); }
      return;
    }
    if (refreshTimer) { return; }
    // At most one fetch a second, however many events arrive.
    var wait = now ? 0 : Math.max(250, 1000 - (Date.now() - lastRefresh));
    refreshTimer = setTimeout(refresh, wait);
  }

  function refresh() {
    refreshTimer = null;
    var target = document.getElementById(data.refreshTarget);
    if (!target) { return; }
    if (target.contains(document.activeElement) && document.activeElement !== document.body) {
      refreshTimer = setTimeout(refresh, 2000);  // never wipe what the operator is typing
      return;
    }
    lastRefresh = Date.now();
    fetch(data.refresh, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (!response.ok || response.redirected) { throw new Error("refresh " + response.status); }
        return response.text();
      })
      .then(function (html) {
        target.innerHTML = html;
        status.dataset.refreshed = String(Number(status.dataset.refreshed || 0) + 1);
      })
      .catch(function () { setStatus("stale", "could not refresh: reload the page"); });
  }

  connect();
})();
