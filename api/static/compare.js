import { startPage } from "/static/api.js"; startPage();
