// Trainyard's portal: the little behaviour every page shares. No inline scripts anywhere:
// the Content-Security-Policy forbids them.
(function () {
  "use strict";
  function csrfToken() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute("content") : "";
  }
  // htmx requests carry the session's form secret, as forms carry it in a hidden field.
  document.addEventListener("htmx:configRequest", function (event) {
    event.detail.headers["X-CSRF-Token"] = csrfToken();
  });
  // Buttons with data-confirm ask before their form is sent.
  document.addEventListener("submit", function (event) {
    var button = event.submitter;
    var message = button && button.getAttribute("data-confirm");
    if (message && !window.confirm(message)) {
      event.preventDefault();
    }
  });
  window.trainyard = { csrfToken: csrfToken };
})();
