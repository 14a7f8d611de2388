// A training job's page: the worker's progress arrives over the job's WebSocket (training_jobs.consumers) and
// each frame asks htmx to redraw the live part (curves, numbers, log) at once; the partial's slow polling stays
// as the fallback when the socket is closed. One socket per page; it closes when the job has finished. The redrawn
// part carries each chart's points as JSON: charts.js (on htmx:load) hands them to the chart already drawn, so its
// zoom, smoothing and hidden runs stay while the curve grows.
(function () {
  let socket = null;
  function connect() {
    const live = document.querySelector("[data-live-ws]");
    if (!live || socket || !("WebSocket" in window)) return;
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + live.dataset.liveWs);
    socket.onmessage = function (event) {
      const frame = JSON.parse(event.data);
      if (frame.type === "progress") document.body.dispatchEvent(new CustomEvent("job-progress"));
      if (frame.job && !frame.job.active) socket.close();
    };
    socket.onclose = function () { socket = null; };
  }
  document.addEventListener("DOMContentLoaded", connect);
  document.body && document.body.addEventListener("htmx:afterSwap", connect);
})();
