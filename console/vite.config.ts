// Vite builds the console into dist/ (index.html + hashed assets) that `python -m appliance.dashboard` serves.
// No plugin: esbuild compiles the JSX for Preact directly, which keeps the toolchain to vite + typescript.
import { defineConfig } from "vite";

export default defineConfig({
  esbuild: { jsx: "automatic", jsxImportSource: "preact" },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2022",
    // The dashboard's CSP forbids inline scripts and styles: never inline assets as data: URLs either.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    reportCompressedSize: false,
  },
});
