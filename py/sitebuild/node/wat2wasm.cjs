// node wat2wasm.cjs WABT_DIR IN.wat OUT.wasm: the WebAssembly text format to its binary, by wabt's own parser.
const fs = require("fs");
const [wabtDir, input, output] = process.argv.slice(2);
require(wabtDir)().then((wabt) => {
  const module = wabt.parseWat(input, fs.readFileSync(input, "utf8"), { simd: true });
  module.validate();
  fs.writeFileSync(output, Buffer.from(module.toBinary({}).buffer));
  module.destroy();
});
