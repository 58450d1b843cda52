// Drives Debian's Firefox ESR for engines.py (beside it) over WebDriver BiDi (puppeteer-core, no geckodriver).
//
// One Firefox per process; the Python side sends one JSON command a line on stdin and reads one JSON answer a
// line on stdout: {"id", "cmd", ...} -> {"id", "ok": true, "value"} or {"id", "ok": false, "error"}.
// Each page lives in its own user context (a fresh profile's storage: cookies, caches, service workers).
// Functions reach the page as source text and are called through the protocol (script.callFunction), which the
// page's CSP does not govern: built here with `new Function` (in Node), never evaluated as a string in the page.
import readline from "node:readline";
import puppeteer from "puppeteer-core";

const [executablePath, width, height, refuser] = process.argv.slice(2);
const [proxyHost, proxyPort] = refuser.split(":");

const browser = await puppeteer.launch({
  browser: "firefox",
  executablePath,
  headless: true,
  // No setViewport (Firefox's BiDi emulation differs by version): the window size comes from the arguments.
  defaultViewport: null,
  args: [`--width=${width}`, `--height=${height}`],
  // Every request to another host goes to the refusing proxy, set for the whole profile: a user context's own
  // proxy (BiDi) is ignored by Firefox ESR 140. Loopback never goes through it (Firefox's default), so the site
  // under test is served with nothing in between.
  extraPrefsFirefox: {
    "network.proxy.type": 1,
    "network.proxy.http": proxyHost,
    "network.proxy.http_port": Number(proxyPort),
    "network.proxy.ssl": proxyHost,
    "network.proxy.ssl_port": Number(proxyPort),
    "network.proxy.share_proxy_settings": true,
    "network.proxy.allow_hijacking_localhost": false,
  },
});

const pages = new Map();
let nextPage = 1;

const fn = (source) => new Function(`return (${source});`)();

async function element(page, find, args) {
  const handle = await page.evaluateHandle(fn(find), ...args);
  const el = handle.asElement();
  if (!el) {
    await handle.dispose();
    throw new Error(`no element for ${JSON.stringify(args)}`);
  }
  return el;
}

const commands = {
  async version() {
    return browser.version();
  },
  async newPage({ local }) {
    const context = await browser.createBrowserContext();
    const page = await context.newPage();
    const entry = { context, page, console: [], requests: [], refused: [] };
    if (!local) {
      // A file:// page is cut off from loopback too: its requests there are refused and recorded.
      await page.setRequestInterception(true);
      page.on("request", (r) => {
        if (/^https?:\/\/(127\.0\.0\.1|localhost)[:/]/.test(r.url())) {
          entry.refused.push(r.url());
          r.abort();
        } else {
          r.continue();
        }
      });
    }
    page.on("console", (m) => entry.console.push(`${m.type()}: ${m.text()}`));
    page.on("pageerror", (e) => entry.console.push(`pageerror: ${e.message ?? e}`));
    page.on("request", (r) => entry.requests.push(r.url()));
    const id = nextPage++;
    pages.set(id, entry);
    return id;
  },
  async goto({ page, url }) {
    await pages.get(page).page.goto(url, { waitUntil: "load", timeout: 120_000 });
  },
  async reload({ page }) {
    await pages.get(page).page.reload({ waitUntil: "load", timeout: 120_000 });
  },
  async evaluate({ page, source, args }) {
    return pages.get(page).page.evaluate(fn(source), ...args);
  },
  async click({ page, find, args }) {
    const el = await element(pages.get(page).page, find, args);
    await el.click();
    await el.dispose();
  },
  async type({ page, find, args, text }) {
    const el = await element(pages.get(page).page, find, args);
    await el.evaluate((e) => { e.focus(); e.select?.(); });
    await el.type(text);
    await el.dispose();
  },
  async viewport({ page, width, height }) {
    // BiDi's browsingContext.setViewport alone: Page.setViewport also overrides the screen's orientation, a command
    // Firefox ESR 140 does not know.
    await pages.get(page).page.mainFrame().browsingContext.setViewport({ viewport: { width, height } });
  },
  async screenshot({ page, path }) {
    await pages.get(page).page.screenshot({ path });
  },
  async events({ page }) {
    const entry = pages.get(page);
    const out = { console: entry.console.splice(0), requests: entry.requests.splice(0),
      refused: entry.refused.splice(0) };
    return out;
  },
  async closePage({ page }) {
    await pages.get(page).context.close();
    pages.delete(page);
  },
};

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  const { id, cmd, ...args } = JSON.parse(line);
  let answer;
  try {
    answer = { id, ok: true, value: (await commands[cmd](args)) ?? null };
  } catch (e) {
    answer = { id, ok: false, error: String(e?.stack ?? e) };
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
}
await browser.close();
