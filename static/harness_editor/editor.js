/* The harness editor (templates/harness_editor/editor.html). The page works without this file; with it:
 *
 * - Unsaved edits are never lost silently. Leaving the page (an editor tab, "Done", any link, closing the
 *   browser tab) asks first, and every edit is copied to localStorage under the saved revision's key
 *   (harness slug, version number, saved content hash: data-draft-key), one entry per editor tab. Reopening the
 *   editor offers "Restore unsaved edits from <time>" or "Discard". Restoring posts the copy back with
 *   op=restore, so the server renders it (added or removed rows included) and saves nothing; a successful save
 *   removes the copy (the next page, at a higher revision, clears what the save carried).
 * - After each live check the preview scrolls (inside its own panel, never the page) to the first line of the
 *   rendered prompt that differs from the saved revision.
 * - Raw YAML tab: CodeMirror (line numbers, YAML highlighting) over the textarea, which still submits; an
 *   error that names a line moves the cursor to it.
 */
(function () {
  "use strict";

  var form = document.getElementById("editor-form");
  if (!form) return;

  var KEY = form.dataset.draftKey;
  var PREFIX = form.dataset.draftPrefix;
  var COMPONENT = form.dataset.component;
  var SAVING = "hat-editor-saving"; // sessionStorage: the save in flight, so the next page can clear its copy
  var initiallyUnsaved = form.dataset.unsaved === "true";
  var leaving = false; // a form is being submitted or the user confirmed leaving
  var offered = null; // the local copy the banner offers, while the user has not chosen
  var timer = null;
  var cm = null;

  function storage(name) {
    try {
      var s = window[name];
      s.getItem("x");
      return s;
    } catch (e) {
      return null; // storage disabled: the page still warns before leaving
    }
  }
  var local = storage("localStorage");
  var session = storage("sessionStorage");

  function readStore(key) {
    if (!local) return {};
    try {
      var value = JSON.parse(local.getItem(key) || "{}");
      return value && typeof value === "object" ? value : {};
    } catch (e) {
      return {};
    }
  }

  function writeStore(key, value) {
    if (!local) return;
    try {
      if (Object.keys(value).length) local.setItem(key, JSON.stringify(value));
      else local.removeItem(key);
    } catch (e) { /* quota: nothing more to do; leaving still asks first */ }
  }

  function tabTitle(component) {
    var a = document.querySelector('.tabs a[href="?tab=' + component + '"]');
    return a ? a.textContent.trim() : component;
  }

  // --- raw YAML: CodeMirror over the textarea ---------------------------------------------------------------

  var textarea = document.getElementById("id_yaml");
  if (textarea && window.CodeMirror) {
    cm = window.CodeMirror.fromTextArea(textarea, {
      mode: "yaml", lineNumbers: true, lineWrapping: true, indentUnit: 2, tabSize: 2, indentWithTabs: false, viewportMargin: 50,
      extraKeys: {Tab: function (ed) { ed.replaceSelection("  "); }},
    });
    // The textarea stays the form's field: copy every edit into it and tell htmx (live check) it changed.
    cm.on("change", function () {
      cm.save();
      textarea.dispatchEvent(new Event("input", {bubbles: true}));
    });
  }

  function jumpToLine(n) {
    var line = Math.max(0, n - 1);
    if (cm) {
      line = Math.min(line, cm.lineCount() - 1);
      cm.getWrapperElement().scrollIntoView({block: "nearest"});
      cm.focus();
      cm.setCursor({line: line, ch: 0});
      cm.scrollIntoView({line: line, ch: 0}, 120);
      cm.addLineClass(line, "background", "cm-jump-target");
      setTimeout(function () { cm.removeLineClass(line, "background", "cm-jump-target"); }, 1500);
    } else if (textarea) {
      var lines = textarea.value.split("\n");
      var pos = lines.slice(0, line).join("\n").length + (line ? 1 : 0);
      textarea.focus();
      textarea.setSelectionRange(pos, pos);
    }
  }

  // --- what the form holds, and the local copy --------------------------------------------------------------

  function fields() {
    if (cm) cm.save();
    var out = [];
    new FormData(form).forEach(function (value, name) {
      if (typeof value === "string" && name !== "csrfmiddlewaretoken" && name !== "op") out.push([name, value]);
    });
    return out;
  }

  var baseline = JSON.stringify(fields());

  function dirty() {
    return initiallyUnsaved || JSON.stringify(fields()) !== baseline;
  }

  function saveDraft() {
    clearTimeout(timer);
    if (offered && offered.component === COMPONENT) return; // never overwrite a copy the user has not looked at
    var store = readStore(KEY);
    if (dirty()) {
      store[COMPONENT] = {component: COMPONENT, title: tabTitle(COMPONENT), savedAt: Date.now(), fields: fields()};
    } else {
      delete store[COMPONENT];
    }
    writeStore(KEY, store);
  }

  function scheduleSave() {
    clearTimeout(timer);
    timer = setTimeout(saveDraft, 250);
  }

  // After a successful save (this page is the redirect to a newer revision) the saved tab's copy goes; the
  // copies of other tabs follow to the new key (each replaces only its own component). Raw YAML copies do not:
  // they hold the whole manifest and would undo what was saved.
  function clearAfterSave() {
    if (!session) return;
    var raw = session.getItem(SAVING);
    if (!raw) return;
    session.removeItem(SAVING);
    var pending;
    try { pending = JSON.parse(raw); } catch (e) { return; }
    if (!pending || typeof pending.key !== "string" || pending.key.indexOf(PREFIX) !== 0) return;
    if (form.dataset.rendered !== "get" || Number(form.dataset.lock) <= Number(pending.lock)) return; // not saved
    var old = readStore(pending.key);
    delete old[pending.component];
    if (pending.key === KEY) {
      writeStore(KEY, old);
      return;
    }
    var current = readStore(KEY);
    Object.keys(old).forEach(function (c) { if (c !== "yaml" && !current[c]) current[c] = old[c]; });
    writeStore(KEY, current);
    writeStore(pending.key, {});
  }

  // Copies left under an older saved revision of this draft (it was saved from elsewhere) can no longer be
  // offered: they go after a month, like any copy nobody came back for.
  function pruneOldCopies() {
    if (!local) return;
    var cutoff = Date.now() - 30 * 24 * 3600 * 1000;
    for (var i = local.length - 1; i >= 0; i--) {
      var key = local.key(i);
      if (!key || key.indexOf("hat-editor-draft:") !== 0 || key === KEY) continue;
      var store = readStore(key);
      var fresh = Object.keys(store).some(function (c) { return store[c] && store[c].savedAt > cutoff; });
      if (!fresh) writeStore(key, {});
    }
  }

  // --- the banner: restore or discard a local copy --------------------------------------------------------

  var banner = document.getElementById("draft-restore");

  function offer() {
    offered = null;
    if (!banner) return;
    var store = readStore(KEY);
    var entries = Object.keys(store).map(function (k) { return store[k]; }).filter(function (en) {
      // a page that already shows unsaved edits of its tab (a check, a restore) is that tab's copy
      return en && Array.isArray(en.fields) && !(initiallyUnsaved && en.component === COMPONENT);
    });
    entries.sort(function (a, b) {
      return (b.component === COMPONENT) - (a.component === COMPONENT) || (b.savedAt || 0) - (a.savedAt || 0);
    });
    if (!entries.length) {
      banner.hidden = true;
      return;
    }
    offered = entries[0];
    banner.querySelector("[data-draft-tab]").textContent = offered.component === COMPONENT
      ? "this tab (" + (offered.title || tabTitle(offered.component)) + ")"
      : "the " + (offered.title || tabTitle(offered.component)) + " tab";
    banner.querySelector("[data-draft-time]").textContent = new Date(offered.savedAt).toLocaleString();
    banner.hidden = false;
  }

  function restore(entry) {
    var post = document.createElement("form");
    post.method = "post";
    post.action = form.dataset.restoreUrl;
    post.hidden = true;
    function add(name, value) {
      var box = document.createElement("textarea"); // keeps line breaks, unlike a hidden input
      box.name = name;
      box.value = value;
      post.appendChild(box);
    }
    add("csrfmiddlewaretoken", form.querySelector("input[name=csrfmiddlewaretoken]").value);
    entry.fields.forEach(function (f) { if (f[0] !== "lock_version") add(f[0], f[1]); });
    // The copy belongs to this saved content (the key holds its hash), so it applies at the current revision.
    add("lock_version", form.querySelector("input[name=lock_version]").value);
    add("op", "restore");
    document.body.appendChild(post);
    leaving = true;
    post.submit();
  }

  if (banner) {
    banner.querySelector("[data-draft-restore]").addEventListener("click", function () {
      if (offered) restore(offered);
    });
    banner.querySelector("[data-draft-discard]").addEventListener("click", function () {
      if (!offered) return;
      var store = readStore(KEY);
      delete store[offered.component];
      writeStore(KEY, store);
      offer();
      saveDraft(); // what was typed meanwhile on this tab is kept from now on
    });
  }

  // --- leaving the page -----------------------------------------------------------------------------------

  form.addEventListener("input", scheduleSave);
  form.addEventListener("change", scheduleSave);

  document.addEventListener("submit", function (e) {
    leaving = true;
    if (e.target !== form) return;
    saveDraft();
    var op = e.submitter && e.submitter.name === "op" ? e.submitter.value : "save";
    if (op === "save" && session) {
      session.setItem(SAVING, JSON.stringify({key: KEY, component: COMPONENT, lock: form.dataset.lock}));
    }
  });

  document.addEventListener("click", function (e) {
    var jump = e.target.closest && e.target.closest("a.jump-line[data-line]");
    if (jump) {
      e.preventDefault();
      jumpToLine(parseInt(jump.dataset.line, 10) || 1);
      return;
    }
    var a = e.target.closest && e.target.closest("a[href]");
    if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    if (a.target && a.target !== "_self") return; // a new tab leaves this one as it is
    var href = a.getAttribute("href") || "";
    if (href.charAt(0) === "#" || !dirty()) return;
    saveDraft();
    var message = "You have unsaved changes on the " + tabTitle(COMPONENT) + " tab.\n\n"
      + "Leave without saving? A copy stays in this browser and is offered when you reopen this draft.";
    if (window.confirm(message)) leaving = true;
    else e.preventDefault();
  });

  window.addEventListener("beforeunload", function (e) {
    saveDraft();
    if (leaving || !dirty()) return;
    e.preventDefault();
    e.returnValue = ""; // older browsers need a value to ask
  });

  // --- the preview: scroll to the first change --------------------------------------------------------------

  function scrollInto(container, el) {
    if (!container || container.scrollHeight <= container.clientHeight) return;
    var offset = el.getBoundingClientRect().top - container.getBoundingClientRect().top;
    container.scrollTop += offset - container.clientHeight / 3;
  }

  function showFirstChange() {
    var live = document.getElementById("live");
    if (!live) return;
    var changes = live.querySelectorAll(".preview.marked .pl.changed, .preview.marked .pl.removed");
    for (var i = 0; i < changes.length; i++) {
      var details = changes[i].closest("details");
      if (details && !details.open) continue;
      scrollInto(changes[i].closest("pre"), changes[i]);
      scrollInto(live, changes[i]);
      return;
    }
  }

  document.body.addEventListener("htmx:afterSettle", showFirstChange); // the live panel was replaced

  clearAfterSave();
  pruneOldCopies();
  if (initiallyUnsaved) saveDraft();
  offer();
  showFirstChange();
})();
