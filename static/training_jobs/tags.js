// Tags, notes and list filters (training_jobs): the pages work as plain forms without this file; with it (and htmx)
// a refused tag or note (4xx) shows its message in place, and a list's filters update its table as you type.
(() => {
  if (window.hatListFilters) return; // the panel's script tag may arrive again with a swapped fragment
  window.hatListFilters = true;

  // htmx drops 4xx answers by default; ours carry the reason in the panel or the table: show it.
  document.body.addEventListener("htmx:beforeSwap", (e) => {
    const status = e.detail.xhr.status;
    const elt = e.detail.requestConfig && e.detail.requestConfig.elt;
    if (status >= 400 && status < 500 && elt && elt.closest && elt.closest("[data-show-errors]")) {
      e.detail.shouldSwap = true;
      e.detail.isError = false;
    }
  });

  // a filtered list's URL names only the filters that are set (it is the one pushed to the address bar)
  document.body.addEventListener("htmx:configRequest", (e) => {
    const elt = e.detail.elt;
    if (!elt || !elt.matches || !elt.matches("form[data-live-filters]")) return;
    const data = e.detail.formData;
    for (const key of Array.from(new Set(data.keys()))) {
      if (data.getAll(key).every((v) => v === "")) data.delete(key);
    }
  });

  // a list's filter form: submit (through htmx, which swaps the table and pushes the URL) when a box changes,
  // and while typing in the search box after a pause
  let timer = null;
  const submit = (form) => {
    clearTimeout(timer);
    timer = null;
    if (typeof form.requestSubmit === "function") form.requestSubmit();
    else form.submit();
  };
  document.addEventListener("change", (e) => {
    const form = e.target.closest && e.target.closest("form[data-live-filters]");
    if (form && !["search", "text"].includes(e.target.type)) submit(form); // typed boxes: on input, below
  });
  document.addEventListener("input", (e) => {
    const form = e.target.closest && e.target.closest("form[data-live-filters]");
    if (!form || !["search", "text"].includes(e.target.type)) return;
    clearTimeout(timer);
    timer = setTimeout(() => submit(form), 350);
  });
})();
