/* Jobdesk's browser behaviour. Loaded with `defer` after htmx; no inline scripts anywhere (strict CSP,
   htmx.config.allowEval = false, so nothing in a page can be turned into code).

   1. Polling pauses while the tab is hidden: a request triggered by an `hx-trigger="every …"` poll is
      cancelled while document.hidden, and every poller refreshes once when the tab is shown again.
   2. Server errors (5xx) and network failures of htmx requests show a short message in #app-alert
      instead of failing silently; the next successful request hides it. (4xx responses are swapped in
      place: the server sends a small message fragment.) */
(function () {
  "use strict";

  function isPoller(elt) {
    var trigger = elt && elt.getAttribute && elt.getAttribute("hx-trigger");
    return !!trigger && /(^|[\s,])every\s/.test(trigger);
  }

  document.addEventListener("htmx:beforeRequest", function (evt) {
    if (document.hidden && isPoller(evt.detail.elt)) {
      evt.preventDefault();
    }
  });

  document.addEventListener("visibilitychange", function () {
    if (document.hidden || typeof htmx === "undefined") {
      return;
    }
    document.querySelectorAll("[hx-trigger*='every']").forEach(function (elt) {
      var url = elt.getAttribute("hx-get");
      if (isPoller(elt) && url) {
        htmx.ajax("GET", url, { source: elt });
      }
    });
  });

  function alertBox() {
    return document.getElementById("app-alert");
  }

  function showAlert(text) {
    var box = alertBox();
    if (box) {
      box.textContent = text;
      box.hidden = false;
    }
  }

  document.addEventListener("htmx:responseError", function (evt) {
    var status = evt.detail.xhr ? evt.detail.xhr.status : 0;
    if (status === 503) {
      showAlert("The server is busy or cannot reach its database. This page will catch up when it is back.");
    } else if (status >= 500) {
      showAlert("Something went wrong on the server (error " + status + "). Try again in a moment.");
    }
  });

  document.addEventListener("htmx:sendError", function () {
    showAlert("Cannot reach the server. Check your connection; this page will catch up when it is back.");
  });

  document.addEventListener("htmx:afterRequest", function (evt) {
    var box = alertBox();
    if (box && !box.hidden && evt.detail.successful) {
      box.hidden = true;
      box.textContent = "";
    }
  });
})();

/* 3. A form marked data-submit-once disables its submit button once sent, so a double click starts one
      job, not two (the server also de-duplicates a repeated job form). */
(function () {
  "use strict";
  document.addEventListener("submit", function (evt) {
    var form = evt.target;
    if (!(form instanceof HTMLFormElement) || !form.hasAttribute("data-submit-once") || evt.defaultPrevented) {
      return;
    }
    form.querySelectorAll("button[type=submit]").forEach(function (button) {
      button.setAttribute("aria-busy", "true");
      window.setTimeout(function () { button.disabled = true; }, 0);
    });
  });
  window.addEventListener("pageshow", function () {
    document.querySelectorAll("form[data-submit-once] button[type=submit]").forEach(function (button) {
      button.disabled = false;
      button.removeAttribute("aria-busy");
    });
  });
})();

/* 3b. A job, pipeline or batch form's one-time key (_form_key) survives the back button. Pages are sent
       `Cache-Control: no-store`, so Back fetches the form page again, with a new key; the browser refills
       the fields a person typed but not a hidden input. Sent then, the form started a second job, or
       started one with the edited values instead of saying that it had started one already. So, as a
       keyed form is sent, the keys of the page's keyed forms are written into this history entry's
       state, and a page reached by Back or Forward (or shown again from the back/forward cache) puts
       them back before it can be sent. Only Back and Forward: a new visit ("Start a job" again), or a
       reload, keeps the new key the server gave, so that a second job is a deliberate choice.
       Not on a page that answered a POST (<body data-posted>: a form shown again with its errors, or
       with "started one already" and a new key): the browser sends that POST again to show it, with
       the key it carried, and the key the server then puts in the form stands. Writing a state there
       would also turn the entry into a plain GET of the URL, and the batch page's mapping step would
       come back as an empty upload form. Without scripts the server's key stands everywhere. The
       server alone decides what a repeated key means (the same job, or the notice). */
(function () {
  "use strict";
  var NAME = "_form_key";
  var STATE = "jobdeskFormKeys";

  // Each keyed form by its id, else its action and its place among forms with that action.
  function keyedForms() {
    var seen = {};
    var found = [];
    document.querySelectorAll("form").forEach(function (form) {
      var input = form.querySelector("input[type=hidden][name='" + NAME + "']");
      if (!input) { return; }
      var name = form.id ? "#" + form.id : (form.getAttribute("action") || "");
      seen[name] = (seen[name] || 0) + 1;
      found.push({ name: name + " " + seen[name], input: input });
    });
    return found;
  }

  function remembered() {
    var state = history.state;
    return state && typeof state === "object" && state[STATE] && typeof state[STATE] === "object" ? state[STATE] : null;
  }

  function restore() {
    var keys = posted() ? null : remembered();
    if (!keys) { return; }
    keyedForms().forEach(function (form) {
      if (typeof keys[form.name] === "string" && keys[form.name]) {
        form.input.value = keys[form.name];
      }
    });
  }

  function posted() {
    return document.body.hasAttribute("data-posted");
  }

  document.addEventListener("submit", function (evt) {
    var form = evt.target;
    if (posted() || !(form instanceof HTMLFormElement) || !form.querySelector("input[type=hidden][name='" + NAME + "']")) {
      return;
    }
    var keys = {};
    keyedForms().forEach(function (keyed) { keys[keyed.name] = keyed.input.value; });
    var state = history.state && typeof history.state === "object" ? history.state : {};
    var next = {};
    Object.keys(state).forEach(function (name) { next[name] = state[name]; });
    next[STATE] = keys;
    try {
      history.replaceState(next, "");
    } catch (e) {
      // a state the browser will not store changes nothing: the form is sent as it is
    }
  });

  var navigation = window.performance && performance.getEntriesByType ? performance.getEntriesByType("navigation")[0] : null;
  if (navigation && navigation.type === "back_forward") {
    restore();
  }
  window.addEventListener("pageshow", function (evt) {
    if (evt.persisted) {
      restore();
    }
  });
})();

/* 4. File inputs with data-max-bytes (UPLOAD_MAX_BYTES) say at once, next to the field, when a chosen
      file is too large, and keep such a form from being sent: the server would refuse the whole request
      with 413 before reading it, and what was typed would be lost. */
(function () {
  "use strict";

  function words(n) {
    var units = ["bytes", "KiB", "MiB", "GiB"];
    var value = n;
    for (var i = 0; i < units.length; i++) {
      if (value < 1024 || i === units.length - 1) {
        if (i === 0) { return Math.floor(value) + " bytes"; }
        return (Math.round(value * 10) / 10).toString() + " " + units[i];
      }
      value = value / 1024;
    }
    return n + " bytes";
  }

  function check(input) {
    var limit = parseInt(input.getAttribute("data-max-bytes"), 10);
    var box = document.getElementById("client-error-" + input.id);
    var problem = null;
    Array.prototype.forEach.call(input.files || [], function (file) {
      if (!problem && limit && file.size > limit) {
        problem = "This file is " + words(file.size) + "; the largest file you can upload is " + words(limit) + ".";
      }
    });
    if (problem) {
      if (!box) {
        box = document.createElement("small");
        box.id = "client-error-" + input.id;
        box.className = "field-error";
        input.insertAdjacentElement("afterend", box);
      }
      box.textContent = problem;
      input.setAttribute("aria-invalid", "true");
      input.setAttribute("aria-describedby", ((input.getAttribute("aria-describedby") || "") + " " + box.id).trim());
    } else if (box) {
      box.remove();
      input.removeAttribute("aria-invalid");
    }
    return !problem;
  }

  document.addEventListener("change", function (evt) {
    var input = evt.target;
    if (input instanceof HTMLInputElement && input.type === "file" && input.hasAttribute("data-max-bytes")) {
      check(input);
    }
  });

  document.addEventListener("submit", function (evt) {
    var form = evt.target;
    if (!(form instanceof HTMLFormElement)) { return; }
    var bad = null;
    form.querySelectorAll("input[type=file][data-max-bytes]").forEach(function (input) {
      if (!check(input) && !bad) { bad = input; }
    });
    if (bad) {
      evt.preventDefault();
      bad.focus();
    }
  }, true);
})();

/* 5. A form shown again with errors moves keyboard and screen-reader focus to its list of problems,
      whose links lead to each field. */
(function () {
  "use strict";
  var summary = document.getElementById("form-errors");
  if (summary) {
    summary.focus();
  }
})();

/* 5b. An action that replaces the part of the page it sits in (Cancel, Retry or Approve on a job, a
       step's card or a row) removed the button that had the keyboard focus, and the browser put the focus
       on the page itself: the next Tab started again at "Skip to content", and a screen reader said
       nothing of where the person now was. When focus was in the part a swap replaces (or the request
       came from a control in it, whose button the request disabled) and no element kept it (htmx keeps
       it on an element whose id comes back), it goes to what replaced that part: its notice when it has
       one ("Approved. …"), else its status line (data-focus-here: "Cancelled", the new status, and the
       buttons that follow it), else the part itself. That holds for a poll's swap too: after "Cancel
       job" on a running job the notice "Stopping the job…" has the focus until the job has stopped, and
       the poll's card that says "Cancelled" has no notice; the focus went to the whole card, which a
       screen reader reads from top to bottom. A poll that changed nothing swaps nothing. */
(function () {
  "use strict";
  var acting = typeof WeakMap === "function" ? new WeakMap() : null;  // a request's xhr: sent from the part it replaces
  var moved = null;

  function lost() {
    var active = document.activeElement;
    return !active || active === document.body || !active.isConnected;
  }

  function within(target) {
    var active = document.activeElement;
    return !!active && active !== document.body && target.contains(active);
  }

  // Before the request: the button is still focused (hx-disabled-elt then takes the focus off it).
  document.addEventListener("htmx:beforeRequest", function (evt) {
    var target = evt.detail.target;
    var elt = evt.detail.elt;
    if (!acting || !target || !target.contains || !evt.detail.xhr) { return; }
    var poll = elt && elt.getAttribute && /(^|[\s,])every\s/.test(elt.getAttribute("hx-trigger") || "");
    if (within(target) || (!poll && elt && elt.nodeType === 1 && target.contains(elt))) {
      acting.set(evt.detail.xhr, true);
    }
  });

  document.addEventListener("htmx:beforeSwap", function (evt) {
    var target = evt.detail.target;
    moved = null;
    if (!target || !target.contains) { return; }
    if (within(target) || (acting && evt.detail.xhr && acting.get(evt.detail.xhr))) {
      moved = { target: target, id: target.id, parent: target.parentNode, prev: target.previousElementSibling };
    }
  });

  // After every swap of the answer (its out-of-band parts included), once.
  document.addEventListener("htmx:afterSwap", function () {
    var was = moved;
    moved = null;
    if (!was || !lost()) { return; }
    var place = null;
    if (was.target.isConnected) {
      place = was.target;
    } else if (was.id && document.getElementById(was.id)) {
      place = document.getElementById(was.id);
    } else if (was.prev && was.prev.isConnected) {
      place = was.prev.nextElementSibling;
    } else if (was.parent && was.parent.isConnected) {
      place = was.parent.firstElementChild;
    }
    if (!place) { return; }
    var spot = place.matches("[role=status], [role=alert]") ? place
      : place.querySelector("[role=status], [role=alert]") || place.querySelector("[data-focus-here]") || place;
    if (!spot.hasAttribute("tabindex")) { spot.setAttribute("tabindex", "-1"); }
    spot.focus();
  });
})();

/* 6. Confirmations (hx-confirm and data-confirm) are asked in an in-page dialog: static/confirm.js. */

/* 7. The notification bell's unread count is fetched once as a page loads; after that the polls the
      page already makes bring it out of band (hx-swap-oob). It has no timer of its own. */
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    var bell = document.getElementById("notif-bell");
    if (bell && !bell.hasAttribute("data-count") && typeof htmx !== "undefined") {
      htmx.ajax("GET", "/notifications/bell", { target: bell, swap: "outerHTML" });
    }
  });
})();

/* 8. A file input with data-read-on-choose sends its own form as soon as a file is chosen. The batch
      page's "Or upload a corrected file" is its own form: a person who chose the corrected file and then
      pressed the big "Check every row and start" had the old file checked again and the chosen one
      dropped without a word. */
(function () {
  "use strict";
  document.addEventListener("change", function (evt) {
    var input = evt.target;
    if (!(input instanceof HTMLInputElement) || input.type !== "file" || !input.hasAttribute("data-read-on-choose")) {
      return;
    }
    if (!input.files || !input.files.length || !input.form) { return; }
    var button = input.form.querySelector("button[type=submit]");
    if (input.form.requestSubmit) { input.form.requestSubmit(button || undefined); } else { input.form.submit(); }
  });
})();

/* 9. A live part of the page (My jobs' status cells, a job's, pipeline's or batch's status card and a
      pipeline's steps) says a change of status in one polite line, "Weekly report: Done", in
      #status-news: a poll's swap used to say nothing, and a live region around the whole card re-read
      all of it (progress, facts, buttons) on each change. Each such part carries its line in data-news
      and an id; a swap that changes the line of a part it replaced puts the new line in #status-news. */
(function () {
  "use strict";
  var before = typeof WeakMap === "function" ? new WeakMap() : null;  // a request's xhr: its parts' lines
  var pending = [];
  var timer = null;

  function lines(root) {
    var out = {};
    if (!root || !root.querySelectorAll) { return out; }
    if (root.matches && root.matches("[data-news][id]")) { out[root.id] = root.getAttribute("data-news"); }
    root.querySelectorAll("[data-news][id]").forEach(function (e) { out[e.id] = e.getAttribute("data-news"); });
    return out;
  }

  function say() {
    timer = null;
    var box = document.getElementById("status-news");
    if (!box || !pending.length) { pending = []; return; }
    box.textContent = pending.join(". ");
    pending = [];
  }

  document.addEventListener("htmx:beforeSwap", function (evt) {
    if (before && evt.detail.xhr) { before.set(evt.detail.xhr, lines(evt.detail.target)); }
  });

  // after the settle: htmx gives a part whose id comes back its old attributes until then
  document.addEventListener("htmx:afterSettle", function (evt) {
    var was = before && evt.detail.xhr ? before.get(evt.detail.xhr) : null;
    if (!was) { return; }
    before.delete(evt.detail.xhr);
    Object.keys(was).forEach(function (id) {
      var now = document.getElementById(id);
      var line = now && now.getAttribute("data-news");
      if (line && line !== was[id] && pending.indexOf(line) < 0) { pending.push(line); }
    });
    // the cells' polls answer one by one: their changes within a moment are said together
    if (pending.length && !timer) { timer = setTimeout(say, 150); }
  });
})();

// History comes again with each status change (out of band): its new events are added to the lines
// shown, instead of the whole History being replaced, so a "Full text" a person opened stays open and
// the older events they loaded stay loaded. An empty History is replaced as it comes.
(function () {
  document.addEventListener("htmx:oobBeforeSwap", function (evt) {
    var old = evt.detail.target;
    if (!old || !old.classList || !old.classList.contains("history")) { return; }
    var lists = old.querySelectorAll("ol.timeline");
    // lines without an event id cannot be matched: those are replaced as they come
    if (!lists.length || evt.detail.fragment.querySelector(".timeline li:not([data-event])")) { return; }
    var list = lists[lists.length - 1];
    var have = {};
    old.querySelectorAll("li[data-event]").forEach(function (li) { have[li.getAttribute("data-event")] = true; });
    evt.detail.fragment.querySelectorAll("li[data-event]").forEach(function (li) {
      if (!have[li.getAttribute("data-event")]) { list.appendChild(document.importNode(li, true)); }
    });
    evt.detail.shouldSwap = false;
  });
})();
