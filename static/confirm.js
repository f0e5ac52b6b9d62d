/* Confirmations in an in-page <dialog> instead of the browser's confirm(): the question (the count and
   what will happen) with "Go back" and a confirm button. No inline script and no eval (strict CSP); the
   dialog is built with DOM calls and every text goes in through textContent.

   - htmx requests with hx-confirm="…": htmx fires `htmx:confirm` before each request; when the element
     asks a question the event is cancelled, the dialog is shown, and only "confirm" sends the request
     (`issueRequest(true)` skips htmx's own confirm()). The button stays disabled while the request runs
     (hx-disabled-elt), as before.
   - Plain forms with data-confirm="…" (the admin console's users and schedules): the submit is held
     back, and sent again with its submitter once confirmed.
   The confirm button's words come from data-confirm-label on the element when it has one. */
(function () {
  "use strict";

  var dialog = null;
  var pending = null;

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text) { node.textContent = text; }
    return node;
  }

  function build() {
    if (dialog) { return dialog; }
    dialog = el("dialog", { id: "confirm-dialog", "aria-labelledby": "confirm-dialog-title", "aria-describedby": "confirm-dialog-question" });
    var article = el("article");
    var title = el("h2", { id: "confirm-dialog-title" }, "Please confirm");
    var question = el("p", { id: "confirm-dialog-question" });
    var footer = el("footer");
    // "Go back", not "Cancel": under "Cancel this job?" a "Cancel" button read as the action itself
    var cancel = el("button", { type: "button", id: "confirm-dialog-cancel", "class": "secondary outline" }, "Go back");
    var ok = el("button", { type: "button", id: "confirm-dialog-ok" }, "Confirm");
    footer.appendChild(cancel);
    footer.appendChild(ok);
    article.appendChild(title);
    article.appendChild(question);
    article.appendChild(footer);
    dialog.appendChild(article);
    document.body.appendChild(dialog);
    cancel.addEventListener("click", function () { close(false); });
    ok.addEventListener("click", function () { close(true); });
    dialog.addEventListener("cancel", function (evt) { evt.preventDefault(); close(false); });  // Escape
    dialog.addEventListener("click", function (evt) { if (evt.target === dialog) { close(false); } });
    return dialog;
  }

  function close(yes) {
    var then = pending;
    pending = null;
    if (dialog && dialog.open) { dialog.close(); }
    if (yes && then) { then(); }
  }

  function ask(question, label, onYes) {
    var box = build();
    box.querySelector("#confirm-dialog-question").textContent = question;
    box.querySelector("#confirm-dialog-ok").textContent = label || "Confirm";
    pending = onYes;
    if (!box.open) { box.showModal(); }
    box.querySelector("#confirm-dialog-cancel").focus();
  }

  function labelOf(elt) {
    var holder = elt && elt.closest ? elt.closest("[data-confirm-label]") : null;
    return holder ? holder.getAttribute("data-confirm-label") : null;
  }

  document.addEventListener("htmx:confirm", function (evt) {
    var question = evt.detail.question;
    if (!question) { return; }
    evt.preventDefault();
    ask(question, labelOf(evt.detail.elt), function () { evt.detail.issueRequest(true); });
  });

  document.addEventListener("submit", function (evt) {
    var form = evt.target;
    var question = form && form.getAttribute && form.getAttribute("data-confirm");
    if (!question || form.hasAttribute("hx-post")) { return; }
    if (form.getAttribute("data-confirmed") === "yes") {
      form.removeAttribute("data-confirmed");
      return;
    }
    evt.preventDefault();
    evt.stopImmediatePropagation();
    var submitter = evt.submitter || null;
    ask(question, labelOf(form), function () {
      form.setAttribute("data-confirmed", "yes");
      if (form.requestSubmit) { form.requestSubmit(submitter); } else { form.submit(); }
    });
  }, true);
})();
