// The practice judge's worker (a module worker): runs the learner's code with practice/runner.py in
// Pyodide, self-hosted under assets/vendor/pyodide/ (no CDN). The page kills this worker when a run
// exceeds its time limit (there are no signals in the browser) and starts a fresh one.
//
// Messages in:  {type: "run", id, code, tests, runner, examplesOnly}
// Messages out: {type: "ready", seconds} once Python is up; {type: "result", id, result, stdout};
//               {type: "error", id, message} when the judge itself broke (not the learner's code).
import { loadPyodide } from "../vendor/pyodide/pyodide.mjs";

const indexURL = new URL("../vendor/pyodide/", import.meta.url).href;
const started = performance.now();
let stdout = [];

const ready = (async () => {
  const pyodide = await loadPyodide({
    indexURL,
    stdout: (line) => stdout.push(line),
    stderr: (line) => stdout.push(line),
  });
  pyodide.FS.mkdirTree("/practice");
  pyodide.runPython("import sys; sys.path.insert(0, '/practice')");
  self.postMessage({ type: "ready", seconds: (performance.now() - started) / 1000 });
  return pyodide;
})();
ready.catch((err) => self.postMessage({ type: "error", id: null, message: `Python did not start: ${err}` }));

let runnerSource = null;

self.onmessage = async (event) => {
  const msg = event.data;
  if (msg.type !== "run") return;
  try {
    const pyodide = await ready;
    if (msg.runner !== runnerSource) {
      pyodide.FS.writeFile("/practice/runner.py", msg.runner);
      pyodide.runPython("import importlib, sys\nif 'runner' in sys.modules: importlib.reload(sys.modules['runner'])");
      runnerSource = msg.runner;
    }
    stdout = [];
    const judge = pyodide.runPython(
      "import json, runner\n" +
        "def _practice_judge(code, tests, examples_only):\n" +
        "    return json.dumps(runner.run(code, tests, examples_only, time_limit=None))\n" +
        "_practice_judge"
    );
    const out = judge(msg.code, msg.tests, !!msg.examplesOnly);
    judge.destroy();
    self.postMessage({ type: "result", id: msg.id, result: JSON.parse(out), stdout: stdout.join("\n") });
  } catch (err) {
    self.postMessage({ type: "error", id: msg.id, message: String(err) });
  }
};
