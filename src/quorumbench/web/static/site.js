// QuorumBench pages: dark-mode toggle, leaderboard auto-refresh and compare picks, an ask's
// live progress, the static export's filters and sorting, and the copy button of a new token.
// The pages work without this script; it only enhances them. Nothing is fetched from elsewhere.
(function () {
  "use strict";
  var KEY = "qb-theme";
  var root = document.documentElement;

  function currentTheme() {
    if (root.dataset.theme) return root.dataset.theme;
    return window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches
      ? "dark" : "light";
  }

  function setupTheme() {
    var button = document.getElementById("theme-toggle");
    if (!button) return;
    button.hidden = false;
    var label = function () {
      button.setAttribute("aria-pressed", currentTheme() === "dark" ? "true" : "false");
    };
    label();
    button.addEventListener("click", function () {
      var next = currentTheme() === "dark" ? "light" : "dark";
      root.dataset.theme = next;
      try { localStorage.setItem(KEY, next); } catch (e) { /* storage may be off */ }
      label();
    });
  }

  function each(list, fn) { Array.prototype.forEach.call(list, fn); }

  // Replace a table's rows with the server's current ones (its data-refresh URL, the
  // same query), keeping the models ticked for comparison.
  function refreshTable(table) {
    var url = table && table.dataset.refresh;
    if (!url || !window.fetch) return Promise.resolve(false);
    return fetch(url, { headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (data) {
        if (!data) return false;
        var picked = {};
        each(table.querySelectorAll("td.pick input:checked"), function (box) {
          picked[box.value] = true;
        });
        table.tBodies[0].innerHTML = data.html;
        each(table.querySelectorAll("td.pick input"), function (box) {
          box.checked = picked[box.value] === true;
        });
        limitPicks();
        var count = document.getElementById("board-count");
        if (table.id === "board" && count && data.count) count.textContent = data.count;
        table.dataset.refreshedAt = new Date().toISOString();
        return true;
      })
      .catch(function () { return false; });
  }

  function refreshBoard() { return refreshTable(document.getElementById("board")); }

  // Compare takes two to four models: once four are ticked, the rest are disabled.
  var MAX_PICKS = 4;
  function limitPicks() {
    var boxes = document.querySelectorAll("#board td.pick input");
    var ticked = document.querySelectorAll("#board td.pick input:checked").length;
    each(boxes, function (box) { box.disabled = !box.checked && ticked >= MAX_PICKS; });
  }

  function setupPicks() {
    var table = document.getElementById("board");
    if (!table) return;
    table.addEventListener("change", function (event) {
      if (event.target.matches && event.target.matches("td.pick input")) limitPicks();
    });
    limitPicks();
  }

  // Every table with a data-refresh URL (the leaderboard, the task list) refreshes
  // its rows every 30 seconds while the page is visible.
  function setupRefresh() {
    each(document.querySelectorAll("table[data-refresh]"), function (table) {
      var seconds = parseInt(table.dataset.interval || "30", 10);
      window.setInterval(function () {
        if (document.visibilityState === "visible") refreshTable(table);
      }, seconds * 1000);
    });
  }

  // An open task's page reloads once its status or round changes (it then shows the
  // results, which are public only once the task is final).
  function checkTask() {
    var watch = document.getElementById("task-watch");
    if (!watch || !window.fetch) return Promise.resolve(false);
    return fetch(watch.dataset.watch, { headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (task) {
        if (!task) return false;
        var changed = task.status !== watch.dataset.status ||
          String(task.round) !== watch.dataset.round;
        if (changed) window.location.reload();
        return changed;
      })
      .catch(function () { return false; });
  }

  function setupTaskWatch() {
    var watch = document.getElementById("task-watch");
    if (!watch) return;
    watch.hidden = false;
    window.setInterval(function () {
      if (document.visibilityState === "visible") checkTask();
    }, 30000);
  }

  // An ask's page follows its status (its progress JSON, read with the session
  // cookie): the badge, the progress bar and the deepening counts change in place,
  // and the page reloads once the live evaluation or the deepening has ended (it then
  // shows the answer).
  function checkAsk() {
    var watch = document.getElementById("ask-watch");
    if (!watch || !window.fetch) return Promise.resolve(false);
    return fetch(watch.dataset.watch, {
      headers: { Accept: "application/json" }, credentials: "same-origin"
    })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (ask) {
        if (!ask) return false;
        var badge = document.getElementById("ask-status-badge");
        if (badge) {
          badge.textContent = ask.status;
          badge.className = "badge status-" + ask.status.toLowerCase();
        }
        var bar = document.getElementById("ask-progress");
        var text = document.getElementById("ask-progress-text");
        if (bar && ask.progress.total) {
          bar.max = ask.progress.total;
          bar.value = ask.progress.done;
          bar.textContent = ask.progress.done + " of " + ask.progress.total;
        }
        if (text && ask.progress.total) {
          text.textContent = ask.progress.done + " of " + ask.progress.total;
        }
        if (ask.deepen) {
          each(document.querySelectorAll("#deepen-progress dd[data-key]"), function (dd) {
            var value = ask.deepen[dd.dataset.key];
            if (value !== undefined) dd.textContent = String(value);
          });
        }
        // reload once something ended: the live evaluation, or the deepening
        var wasRunning = watch.dataset.status === "PENDING" || watch.dataset.status === "STARTED";
        var ended = (wasRunning && ask.done) ||
          (watch.dataset.deepen === "running" && ask.deepen && ask.deepen.finished === true);
        watch.dataset.status = ask.status;
        if (ended) window.location.reload();
        return ended;
      })
      .catch(function () { return false; });
  }

  function setupAskWatch() {
    var watch = document.getElementById("ask-watch");
    if (!watch) return;
    watch.hidden = false;
    var seconds = parseInt(watch.dataset.interval || "2", 10);
    var timer = window.setInterval(function () {
      if (document.visibilityState !== "visible") return;
      checkAsk().then(function (done) { if (done) window.clearInterval(timer); });
    }, seconds * 1000);
  }

  // The static export has no server: filter and sort its rows in place, from the
  // data-* attributes each row carries.
  var SIZE = /^\s*(\d+(?:\.\d+)?)\s*([kmbt]?)\s*$/i;
  var UNITS = { "": 1, k: 1e3, m: 1e6, b: 1e9, t: 1e12 };
  function parseSize(text) {
    var match = SIZE.exec(text || "");
    return match ? parseFloat(match[1]) * UNITS[match[2].toLowerCase()] : null;
  }

  function setupStaticFilters() {
    var box = document.getElementById("static-filters");
    var table = document.getElementById("board");
    if (!box || !table) return;
    box.hidden = false;
    var field = function (name) { return box.querySelector("[name=" + name + "]"); };
    var count = document.getElementById("board-count");
    function apply() {
      var needle = field("q").value.trim().toLowerCase();
      var type = field("type").value;
      var license = field("license") ? field("license").value : "";
      var min = parseSize(field("min_params").value);
      var max = parseSize(field("max_params").value);
      each([field("min_params"), field("max_params")], function (input) {
        var bad = input.value.trim() !== "" && parseSize(input.value) === null;
        input.setAttribute("aria-invalid", bad ? "true" : "false");
      });
      var shown = 0;
      each(table.tBodies[0].rows, function (row) {
        if (!row.dataset.model) return;
        var params = row.dataset.params === "" ? null : parseFloat(row.dataset.params);
        var keep = (needle === "" || row.textContent.toLowerCase().indexOf(needle) >= 0) &&
          (type === "" || row.dataset.type === type) &&
          (license === "" || row.dataset.license === license) &&
          (min === null || (params !== null && params >= min)) &&
          (max === null || (params !== null && params <= max));
        row.hidden = !keep;
        if (keep) shown += 1;
      });
      if (count) count.textContent = shown + (shown === 1 ? " model" : " models");
    }
    box.addEventListener("input", apply);
    box.addEventListener("change", apply);
  }

  var TEXT_KEYS = { name: true, type: true, updated_at: true };
  function setupStaticSort() {
    var table = document.getElementById("board");
    if (!table) return;
    each(table.querySelectorAll("thead [data-sort]"), function (label) {
      var key = label.dataset.sort;
      var button = document.createElement("button");
      button.type = "button";
      button.className = "sort";
      button.textContent = label.textContent;
      label.textContent = "";
      label.appendChild(button);
      button.addEventListener("click", function () {
        var th = label.closest("th");
        var current = th.getAttribute("aria-sort");
        var order = current ? (current === "ascending" ? "desc" : "asc") : label.dataset.order;
        sortRows(table, key, order);
        each(table.querySelectorAll("thead th"), function (cell) { cell.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", order === "asc" ? "ascending" : "descending");
      });
    });
  }

  function sortRows(table, key, order) {
    var body = table.tBodies[0];
    var rows = Array.prototype.filter.call(body.rows, function (row) { return row.dataset.model; });
    var sign = order === "asc" ? 1 : -1;
    var value = function (row) {
      var raw = row.dataset[key];
      if (raw === undefined || raw === "") return null;
      return TEXT_KEYS[key] ? raw : parseFloat(raw);
    };
    rows.sort(function (a, b) {
      var x = value(a), y = value(b);
      if (x === null || y === null) {  // rows without the value stay at the bottom
        if (x === y) return parseInt(a.dataset.model, 10) - parseInt(b.dataset.model, 10);
        return x === null ? 1 : -1;
      }
      if (x < y) return -sign;
      if (x > y) return sign;
      return parseInt(a.dataset.model, 10) - parseInt(b.dataset.model, 10);
    });
    each(rows, function (row) { body.appendChild(row); });
  }

  // A "Copy" button beside a field that shows something once (a new API token): the
  // field stays selectable by hand without the script.
  function setupCopy() {
    each(document.querySelectorAll("button.copy[data-copy]"), function (button) {
      var field = document.getElementById(button.dataset.copy);
      if (!field || !navigator.clipboard) return;
      button.hidden = false;
      button.addEventListener("click", function () {
        field.select();
        navigator.clipboard.writeText(field.value).then(function () {
          button.textContent = "Copied";
        }, function () {
          button.textContent = "Select and copy by hand";
        });
      });
    });
    var shown = document.querySelector("input.token");
    if (shown) shown.addEventListener("focus", function () { shown.select(); });
  }

  window.quorumbench = {
    refreshBoard: refreshBoard,
    refreshTable: refreshTable,
    checkTask: checkTask,
    checkAsk: checkAsk
  };
  document.addEventListener("DOMContentLoaded", function () {
    setupTheme();
    setupRefresh();
    setupPicks();
    setupTaskWatch();
    setupAskWatch();
    setupStaticFilters();
    setupStaticSort();
    setupCopy();
  });
})();
