// The home page: every experiment, in the list a project's page shows too.

import { startPage } from "/static/api.js";
import { el, replace } from "/static/dom.js";
import { experimentList } from "/static/experiment_list.js";

const main = document.getElementById("main");
startPage().then((user) => {
  if (!user) return;
  const box = el("div");
  replace(main, el("h1", {}, "Experiments"), box);
  experimentList(box);
});
