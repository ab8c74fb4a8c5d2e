/* dtq admin: keep a bulk job's progress bar current by polling its small JSON view until the
   job has finished. Without this script the page shows the state it was rendered with. */
(function () {
  "use strict";
  var box = document.getElementById("dtq-bulk-job");
  if (!box || !window.fetch) { return; }
  var bar = document.getElementById("dtq-bulk-progress");
  var text = document.getElementById("dtq-bulk-text");

  function show(job) {
    bar.max = Math.max(job.count, 1);
    bar.value = job.done + job.skipped;
    box.dataset.state = job.state;
    text.textContent = job.done + " done, " + job.skipped + " skipped of " + job.count +
      " · " + job.state + (job.outcome ? " · " + job.outcome : "");
  }

  function poll() {
    if (box.dataset.state === "finished") { return; }
    fetch(box.dataset.url, { credentials: "same-origin" })
      .then(function (reply) { return reply.ok ? reply.json() : null; })
      .then(function (job) { if (job) { show(job); } setTimeout(poll, 500); })
      .catch(function () { setTimeout(poll, 2000); });
  }

  poll();
})();
