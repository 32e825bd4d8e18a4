// Verdicts change while people read: ask for the states of the operations on the page every
// two seconds and update their cells; an operation's own page reloads its content in place
// when its record has changed. No library, no build step.
"use strict";
(function () {
  var main = document.querySelector("main[data-live]");
  if (!main) { return; }
  var PERIOD_MS = 2000;
  var last = {};

  function ids() {
    var found = [];
    document.querySelectorAll("[data-op-id]").forEach(function (el) {
      var id = el.getAttribute("data-op-id");
      if (found.indexOf(id) < 0) { found.push(id); }
    });
    return found;
  }

  function setField(row, name, value) {
    var cell = row.querySelector('[data-field="' + name + '"]');
    if (!cell || cell.textContent === value) { return; }
    cell.textContent = value;
    if (name === "state" || name === "verdict") { cell.className = name + "-" + value; }
  }

  function refreshOperationPage() {
    fetch(window.location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (!text) { return; }
        var fresh = new DOMParser().parseFromString(text, "text/html").querySelector("main");
        var current = document.querySelector("main");
        if (fresh && current && !current.contains(document.activeElement)) {
          current.replaceWith(fresh);
        }
      });
  }

  function apply(op) {
    var key = [op.state, op.verdict, op.reason, op.final, op.version].join("|");
    var changed = last[op.id] !== undefined && last[op.id] !== key;
    last[op.id] = key;
    document.querySelectorAll('[data-op-id="' + op.id + '"]').forEach(function (row) {
      setField(row, "state", op.state);
      setField(row, "verdict", op.verdict || "PENDING");
      setField(row, "reason", op.reason || "");
      setField(row, "final", op.final ? "yes" : "no");
    });
    if (changed && main.getAttribute("data-live") === "operation") { refreshOperationPage(); }
  }

  function poll() {
    var wanted = ids();
    if (!wanted.length) { return; }
    fetch("/console/live?ids=" + encodeURIComponent(wanted.join(",")), { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : { operations: [] }; })
      .then(function (body) { body.operations.forEach(apply); })
      .catch(function () { /* the next poll tries again */ });
  }

  poll();
  window.setInterval(poll, PERIOD_MS);
})();
