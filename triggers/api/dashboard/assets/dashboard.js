// The dashboard's one script. Without it every page still reads: times in UTC, and a
// reload shows what changed. With it: times in the viewer's own zone (UTC on hover),
// relative times kept current, and the parts of a page marked data-live refreshed every
// few seconds while the tab is visible (never while a form field has the focus).
"use strict";
(function () {
  const REFRESH_MS = 5000;
  const parts = new Intl.DateTimeFormat("en-CA", {
    year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
    second: "2-digit", hourCycle: "h23", timeZoneName: "short",
  });
  // 2026-12-02 05:32:10 CET: the same shape as the page's UTC, in the viewer's zone.
  const shape = {
    format(at) {
      const p = {};
      for (const part of parts.formatToParts(at)) p[part.type] = part.value;
      return `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}:${p.second} ${p.timeZoneName}`;
    },
  };

  function relative(ms) {
    const seconds = Math.abs(ms) / 1000;
    let words;
    if (seconds < 1) return "just now";
    if (seconds >= 86400) words = Math.floor(seconds / 86400) + " d";
    else if (seconds >= 3600) words = Math.floor(seconds / 3600) + " h";
    else if (seconds >= 60) words = Math.floor(seconds / 60) + " min";
    else words = Math.floor(seconds) + " s";
    return ms > 0 ? "in " + words : words + " ago";
  }

  function localise(root) {
    for (const node of root.querySelectorAll("time[datetime]")) {
      const at = new Date(node.getAttribute("datetime"));
      if (isNaN(at)) continue;
      const utc = node.getAttribute("title") || "";
      if (!utc.startsWith("UTC")) node.setAttribute("title", "UTC: " + utc.replace(" UTC", ""));
      node.textContent = node.hasAttribute("data-relative")
        ? relative(at - Date.now())
        : shape.format(at);
    }
  }

  function busy() {
    const active = document.activeElement;
    return active && active.closest("form") && active.matches("input, textarea, select");
  }

  let shown = null;  // the ETag of the page last drawn: the daemon answers 304 to it

  function tick() {
    for (const node of document.querySelectorAll("time[datetime][data-relative]")) {
      const at = new Date(node.getAttribute("datetime"));
      if (!isNaN(at)) node.textContent = relative(at - Date.now());
    }
  }

  async function refresh() {
    if (document.hidden || busy()) return;
    let response;
    const headers = { "X-Dashboard-Refresh": "1" };
    if (shown) headers["If-None-Match"] = shown;
    try {
      response = await fetch(location.href, {
        credentials: "same-origin", headers: headers, redirect: "follow", cache: "no-store",
      });
    } catch (error) {
      return;  // the daemon restarting: the next round tries again
    }
    const live = document.getElementById("live");
    if (response.status === 304) {  // nothing changed: only the relative times move on
      tick();
      if (live) live.textContent = "live: refreshed " + shape.format(new Date());
      return;
    }
    if (!response.ok || new URL(response.url).pathname !== location.pathname) {
      return;  // signed out, or the page is gone: a reload says why
    }
    shown = response.headers.get("ETag");
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    for (const part of fresh.querySelectorAll("[data-live][id]")) {
      const here = document.getElementById(part.id);
      if (here && here.innerHTML !== part.innerHTML && !here.contains(document.activeElement)) {
        here.innerHTML = part.innerHTML;
        localise(here);
      }
    }
    if (live) live.textContent = "live: refreshed " + shape.format(new Date());
  }

  document.addEventListener("DOMContentLoaded", function () {
    localise(document);
    const live = document.getElementById("live");
    if (live) live.textContent = "times in your zone (UTC on hover)";
    if (document.querySelector("[data-live]")) setInterval(refresh, REFRESH_MS);
  });
})();
