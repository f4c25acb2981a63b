// Refreshes a page's live parts (hx-trigger="tether:changed from:body") as the region's events
// come: one EventSource per page, on the stream the page names in <body data-events>, and at
// most one refresh every quarter of a second however many events arrive.
(function () {
  "use strict";
  var stream = document.body.dataset.events;
  if (!stream || !window.EventSource) {
    return;
  }
  var pending = null;
  function changed() {
    if (pending !== null) {
      return;
    }
    pending = window.setTimeout(function () {
      pending = null;
      htmx.trigger(document.body, "tether:changed");
    }, 250);
  }
  var events = new EventSource(stream);
  events.onmessage = changed;
  // Events no longer kept: the page shows the state now instead.
  events.addEventListener("snapshot", changed);
  events.onopen = changed;
})();
