// Optimisation of "install the packages": loadPackage asks for the wheels only once Python has started, and on a
// slow link the link is idle until then (the runtime's last ~second is all CPU). So the wheels are requested as
// soon as the runtime's own downloads are in, with the URLs and integrity loadPackage will use, a group once the
// one before it is in: the network's fetch hands loadPackage these responses. Feature test: none needed.
// Fallback: loadPackage downloads them itself.

/** Requests each group's wheels early (`order`: filesInOrder), unless forced off. */
export function requestEarly(ctx, net, order) {
  if (!ctx.use("early-requests", true, "")) return;
  let after = net.runtimeIn;
  for (const group of order) {
    const requested = group.map(({ url, integrity }) => {
      const resp = after.then(() => net.download(url, url, { integrity }));
      resp.catch(() => undefined); // loadPackage gets this promise and reports its failure, naming the file
      net.early.set(url, resp);
      return resp;
    });
    if (requested.length) after = Promise.allSettled(requested); // a group of no packages waits for nothing
  }
}
