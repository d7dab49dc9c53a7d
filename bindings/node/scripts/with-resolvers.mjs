// DSH needs Node >= 22.19; on the Node 20 this package supports, its coordinator's one newer
// call, `Promise.withResolvers`, is polyfilled by importing this module (tests, benchmarks).
Promise.withResolvers ??= function withResolvers() {
  let resolve;
  let reject;
  const promise = new Promise((a, b) => {
    resolve = a;
    reject = b;
  });
  return { promise, resolve, reject };
};
