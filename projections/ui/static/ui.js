// gpuledger dashboard: follow the projection live. The server sends the projection's last
// applied sequence (server-sent events) when it changes; the page then fetches itself again
// and swaps <main>. Nothing else runs here; every page reads fine without it.
(function () {
  // a 503 page (projection busy) tries again by itself
  var retry = document.body.dataset.retry;
  if (retry) setTimeout(function () { location.reload(); }, 1000 * Number(retry));
  if (!window.EventSource || document.body.dataset.live !== "1") return;
  var seq = document.body.dataset.seq;
  var busy = false;
  var src = new EventSource("/api/seq");
  src.onmessage = function (ev) {
    if (ev.data === seq || busy) return;
    busy = true;
    fetch(location.href, { headers: { "X-Partial": "1" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (text === null) return;
        var doc = new DOMParser().parseFromString(text, "text/html");
        var main = doc.getElementById("main");
        if (main) document.getElementById("main").replaceWith(main);
        seq = doc.body.dataset.seq || ev.data;
        document.body.dataset.seq = seq;
        var live = document.getElementById("live");
        live.textContent = "seq " + seq;
        live.classList.add("updated");
      })
      .finally(function () { busy = false; });
  };
})();
// Filters: a changed <select data-autosubmit> submits its form (no inline handlers: the
// Content-Security-Policy allows scripts from this server only).
document.addEventListener("change", function (ev) {
  var t = ev.target;
  if (t && t.dataset && t.dataset.autosubmit && t.form) t.form.submit();
});
