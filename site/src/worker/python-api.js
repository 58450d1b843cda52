// The names the workers read from the namespace they run the app's Python in (prelude.py, then boot.py), declared
// here once, each with the file that defines it at the top level: renaming one there means renaming it here
// (tests/site/test_runtime_shape.py checks each is where this says). The names the workers set there for prelude.py
// are app.js's (preludeFacts, importApp) and worker.js's (location_json, for boot.py).

export const PY = Object.freeze({
  TIMINGS: "timings", // prelude.py: seconds per start-up step, sent to the page with 'render'
  WARM_UP: "warm_up", // prelude.py: the snapshot worker builds the default page once before its snapshot
  PLAYGROUND: "playground", // boot.py: the app on this page; its hidden views are built after 'ready'
  LINK_DOCS: "link_docs", // boot.py: from 'rendered' on, the document's changes go to the page as patches
  APPLY_PATCH: "apply_patch", // boot.py: the page's 'patch'
  SET_LOCATION: "set_location", // boot.py: the page's 'location'
  DELIVER_FILES: "deliver_files", // boot.py: files dropped on the page ('files')
});

// Modules the workers import and call, each with the function JS calls (renaming one there means renaming it here).
export const PY_MODULES = Object.freeze({
  LESSON_HOST: "playground.lesson_host", // handle(playground, request_json) -> answer_json; host_for(state).model_npz()
  LESSONS: "lessons", // run_challenge(code, check, model=) in the learner's worker
});
