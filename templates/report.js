"use strict";
// Copy buttons on fix blocks (without JS the block is still select-all on click) and logs opened
// for printing. Nothing here loads anything.
document.querySelectorAll("pre.fix").forEach(function (pre) {
  var button = document.createElement("button");
  button.type = "button";
  button.className = "copy";
  button.textContent = "Copy";
  button.addEventListener("click", function () {
    var done = function () {
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = "Copy"; }, 1500);
    };
    var select = function () {
      var range = document.createRange();
      range.selectNodeContents(pre);
      var selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      try { if (document.execCommand("copy")) { done(); } } catch (e) { /* selected: Ctrl+C works */ }
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(pre.textContent).then(done, select);
    } else {
      select();
    }
  });
  pre.parentNode.insertBefore(button, pre);
});
var closedForPrint = [];
window.addEventListener("beforeprint", function () {
  closedForPrint = Array.prototype.filter.call(document.querySelectorAll("details"), function (d) { return !d.open; });
  closedForPrint.forEach(function (d) { d.open = true; });
});
window.addEventListener("afterprint", function () {
  closedForPrint.forEach(function (d) { d.open = false; });
});
