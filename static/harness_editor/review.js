// Approve waits for the review checklist: every "Approve" button marked data-needs-checklist stays disabled until
// each checklist box of its form is ticked. The server refuses an approval with an unticked item anyway; this only
// says so before the click. Without JavaScript the buttons stay enabled and the server's answer explains.
(function () {
  "use strict";
  function wire(form) {
    var boxes = form.querySelectorAll("input[data-checklist-item]");
    if (!boxes.length) return;
    var buttons = form.querySelectorAll("button[data-needs-checklist]");
    function update() {
      var all = Array.prototype.every.call(boxes, function (b) { return b.checked; });
      buttons.forEach(function (btn) {
        btn.disabled = !all;
        btn.title = all ? "" : "tick every item of the review checklist first";
      });
    }
    boxes.forEach(function (b) { b.addEventListener("change", update); });
    update();
  }
  document.querySelectorAll("form[data-review-form]").forEach(wire);
  // a comment form opened from a line link: bring it into view with its text box focused
  var open = document.querySelector("form.comment-form textarea");
  if (open) { open.scrollIntoView({block: "center"}); open.focus(); }
})();
