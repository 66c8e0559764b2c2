// QuorumBench pages: dark-mode toggle and leaderboard auto-refresh. The pages work
// without this script; it only enhances them. Nothing is fetched from elsewhere.
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

  // Replace the leaderboard's rows with the server's current ones (same query).
  function refreshBoard() {
    var table = document.getElementById("board");
    var url = table && table.dataset.refresh;
    if (!url || !window.fetch) return Promise.resolve(false);
    return fetch(url, { headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (data) {
        if (!data) return false;
        table.tBodies[0].innerHTML = data.html;
        var count = document.getElementById("board-count");
        if (count && data.count) count.textContent = data.count;
        table.dataset.refreshedAt = new Date().toISOString();
        return true;
      })
      .catch(function () { return false; });
  }

  function setupRefresh() {
    var table = document.getElementById("board");
    if (!table || !table.dataset.refresh) return;
    var seconds = parseInt(table.dataset.interval || "30", 10);
    window.setInterval(function () {
      if (document.visibilityState === "visible") refreshBoard();
    }, seconds * 1000);
  }

  // The static export has no server to search: filter its rows in place.
  function setupStaticSearch() {
    var box = document.getElementById("static-search");
    var table = document.getElementById("board");
    if (!box || !table) return;
    box.hidden = false;
    var input = box.querySelector("input");
    input.addEventListener("input", function () {
      var needle = input.value.trim().toLowerCase();
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        row.hidden = needle !== "" && row.textContent.toLowerCase().indexOf(needle) < 0;
      });
    });
  }

  window.quorumbench = { refreshBoard: refreshBoard };
  document.addEventListener("DOMContentLoaded", function () {
    setupTheme();
    setupRefresh();
    setupStaticSearch();
  });
})();
