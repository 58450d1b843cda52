// Whether the page's Content-Security-Policy lets it fetch a lesson file: the panel then names an origin the policy
// leaves out (python build.py --lesson-origin adds one) instead of showing a failed fetch. It reads the policy of
// the page's <meta>, which the build writes; a policy a host sends as a header may refuse more (such a fetch then
// fails as any other).

const DEFAULT_PORTS = { "http:": "80", "https:": "443" };

/** The sources of `directive` in a policy's text (else of default-src); null when it has neither. */
export function sources(policy, directive = "connect-src") {
  const directives = new Map(policy.split(";").map((d) => d.trim().split(/\s+/)).filter((d) => d[0])
    .map(([name, ...values]) => [name.toLowerCase(), values]));
  return directives.get(directive) ?? directives.get("default-src") ?? null;
}

/** Whether one CSP source expression allows `url` (a URL) on a page at `self` (a URL). */
export function allows(source, url, self) {
  const s = source.toLowerCase();
  const schemeOk = (scheme) => scheme === url.protocol || (scheme === "http:" && url.protocol === "https:");
  if (s === "'self'") return url.origin === self.origin;
  if (s.startsWith("'")) return false; // 'none', nonces, hashes: no URL
  if (s === "*") return ["http:", "https:"].includes(url.protocol) || url.protocol === self.protocol;
  if (/^[a-z][a-z0-9+.-]*:$/.test(s)) return schemeOk(s); // a scheme alone: any host
  const m = /^(?:([a-z][a-z0-9+.-]*:)\/\/)?(\*|(?:\*\.)?[^/:]+)(?::(\d+|\*))?(\/.*)?$/.exec(s);
  if (!m) return false;
  const [, scheme, host, port, path] = m;
  if (!schemeOk(scheme || self.protocol)) return false;
  const hostname = url.hostname.toLowerCase();
  if (host.startsWith("*.") ? !hostname.endsWith(host.slice(1)) : host !== "*" && host !== hostname) return false;
  const urlPort = url.port || DEFAULT_PORTS[url.protocol];
  // No port in the source: the scheme's default (http's 80 also stands for https's 443).
  const wanted = port ?? DEFAULT_PORTS[scheme || self.protocol];
  if (port !== "*" && wanted !== urlPort && !(wanted === "80" && urlPort === "443" && url.protocol === "https:")) {
    return false;
  }
  if (path) return path.endsWith("/") ? url.pathname.startsWith(path) : url.pathname === path;
  return true;
}

/** Whether this page's <meta> policy lets it fetch `url`. */
export function mayFetch(url, doc = document, self = location) {
  const metas = [...doc.querySelectorAll('meta[http-equiv="Content-Security-Policy" i]')];
  // Several policies: each must allow it.
  return metas.every((meta) => {
    const list = sources(meta.content);
    return list === null || list.some((source) => allows(source, url, new URL(self.href)));
  });
}
