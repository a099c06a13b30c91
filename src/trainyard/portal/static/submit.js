// The Submit page: the server converts between the form and the YAML editor (htmx posts
// the whole form on each edit); this only notes which side the user changed last, for
// Check, Submit and Export, and loads an imported file into the editor.
(function () {
  "use strict";
  var form = document.getElementById("submit-form");
  if (!form) {
    return;
  }
  var edited = document.getElementById("edited");
  form.addEventListener("input", function (event) {
    var target = event.target;
    if (target.closest("#yaml-pane")) {
      edited.value = "yaml";
    } else if (target.closest("#form-pane")) {
      edited.value = "form";
    }
  });
  var picker = document.getElementById("yaml-import");
  picker.addEventListener("change", function () {
    var file = picker.files && picker.files[0];
    if (!file) {
      return;
    }
    file.text().then(function (text) {
      var editor = document.getElementById("yaml");
      editor.value = text;
      picker.value = "";
      // As if typed: the form follows through the same request as an edit.
      editor.dispatchEvent(new Event("input", { bubbles: true }));
    });
  });
})();
