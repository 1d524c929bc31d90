// A page's view in its address: the sort, filters, columns, selection and tab a user sees are
// kept in the query string, so a copied link opens the same view and Back returns to it.
//
// A page declares its view's keys with their defaults; only values that differ from the
// default are written, so a page's plain address stays plain. Lists are comma-separated.

export class AddressState {
  // defaults: { key: default } where a default is a string, a number, a boolean or an array.
  constructor(defaults) {
    this.defaults = defaults;
    this.values = { ...defaults };
    const params = new URLSearchParams(location.search);
    for (const [key, fallback] of Object.entries(defaults)) {
      if (params.has(key)) this.values[key] = parse(params.get(key), fallback);
    }
  }

  get(key) {
    return this.values[key];
  }

  // Changes some keys and rewrites the address in place (no new history entry: typing in a
  // filter must not fill the Back button).
  set(changes) {
    Object.assign(this.values, changes);
    const params = new URLSearchParams(location.search);
    for (const [key, fallback] of Object.entries(this.defaults)) {
      const text = format(this.values[key]);
      if (text === format(fallback)) params.delete(key);
      else params.set(key, text);
    }
    const search = params.toString();
    history.replaceState(history.state, "", `${location.pathname}${search ? `?${search}` : ""}${location.hash}`);
  }
}

function format(value) {
  return Array.isArray(value) ? value.join(",") : String(value);
}

function parse(text, fallback) {
  if (Array.isArray(fallback)) return text ? text.split(",") : [];
  if (typeof fallback === "number") {
    const number = Number(text);
    return Number.isFinite(number) ? number : fallback;
  }
  if (typeof fallback === "boolean") return text === "true";
  return text;
}
