// The Jobs page: "select all" for the bulk Stop, and the count of the selected jobs.
(function () {
  "use strict";
  var form = document.getElementById("bulk-stop");
  if (!form) { return; }
  var all = document.getElementById("select-all");
  var count = document.getElementById("selected-count");
  var button = document.getElementById("stop-selected");
  function boxes() { return form.querySelectorAll('input[name="job"]'); }
  function update() {
    var ticked = form.querySelectorAll('input[name="job"]:checked').length;
    count.textContent = ticked ? ticked + " selected" : "";
    button.disabled = ticked === 0;
    all.checked = ticked > 0 && ticked === boxes().length;
  }
  all.addEventListener("change", function () {
    boxes().forEach(function (box) { box.checked = all.checked; });
    update();
  });
  form.addEventListener("change", function (event) {
    if (event.target !== all) { update(); }
  });
  update();
})();
