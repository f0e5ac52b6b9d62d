/* Account pages' behaviour (sign-in, /account, /admin/users). No inline scripts (strict CSP).

   1. A hidden field marked data-browser-zone gets the browser's IANA time zone, so the first sign-in can
      store it as the person's zone (the server ignores a name it does not know).
   2. A button with data-copy="<element id>" copies that element's text to the clipboard and says so. */
(function () {
  "use strict";
  var zone = "";
  try {
    zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
  } catch (e) {
    zone = "";
  }
  document.querySelectorAll("input[data-browser-zone]").forEach(function (input) {
    input.value = zone;
  });

  function copied(button, ok) {
    var status = document.getElementById(button.getAttribute("data-copy") + "-copied");
    if (status) {
      status.textContent = ok ? "Copied." : "Select the text and copy it yourself.";
    }
  }

  document.addEventListener("click", function (evt) {
    var button = evt.target instanceof Element ? evt.target.closest("button[data-copy]") : null;
    if (!button) { return; }
    var source = document.getElementById(button.getAttribute("data-copy"));
    if (!source) { return; }
    var value = source.textContent.trim();
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(value).then(function () { copied(button, true); }, function () { copied(button, false); });
    } else {
      var range = document.createRange();
      range.selectNodeContents(source);
      var selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      var ok = false;
      try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
      copied(button, ok);
    }
  });
})();
