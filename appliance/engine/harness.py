"""The JavaScript that the child installs in every fresh isolate before it receives work.

Evaluating HARNESS_JS yields an object of three functions that Python keeps as handles; nothing
of the harness is reachable from the global object except ``console``, the timer functions (and,
once a run starts, ``scheduled``). The harness captures the built-ins it relies on (JSON.stringify,
eval, Promise's then, Atomics.waitAsync) before any script runs, so a script that replaces them
only affects itself — and only for its own run: every execution gets a new isolate.

- ``install(scheduledJson, outputLimitBytes)`` defines the deeply frozen, non-writable,
  non-configurable global ``scheduled`` and arms the console budget.
- ``run(code)`` evaluates the script as a global script (indirect eval keeps completion-value
  semantics) and returns a JSON string describing the outcome with the console output so far,
  or a promise of one when the completion value is a promise or thenable.
- ``drain()`` returns the captured console output and its truncated flag as a JSON string (for
  the paths where ``run`` gave no outcome: a timeout, the heap limit).

Everything handed to Python is a JSON string made by JSON.stringify, which escapes a lone
surrogate as ``\\udXXX``: mini-racer cannot convert a JS string holding one (it hangs on the
UTF-8 decode). Python then applies the one replacement rule (text.py).

Timers follow the HTML rules that matter to a script: ``setTimeout(handler, delay, ...args)``
and ``setInterval`` convert the delay like WebIDL ``long`` (``delay | 0``: missing, NaN,
Infinity and out-of-range values become 0) and clamp a negative one to 0; the handler always
runs asynchronously, in a later task, never inside the call; timers fire in order of due time,
then of creation; a string handler is evaluated as global code; ``clearTimeout`` and
``clearInterval`` share one id space and ignore unknown ids. An exception thrown by a handler is
written to the console as an ``[error] Uncaught ...`` line and the other timers keep running.
Timers still pending when the script's completion value settles never run: the isolate is
disposed.
"""

from __future__ import annotations

HARNESS_JS = r"""
(function () {
  "use strict";
  const g = globalThis;
  const indirectEval = g.eval;
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const freeze = Object.freeze;
  const setPrototypeOf = Object.setPrototypeOf;
  const defineProperty = Object.defineProperty;
  const getOwnPropertyNames = Object.getOwnPropertyNames;
  const PromiseCtor = Promise;
  const promiseResolve = Promise.resolve.bind(Promise);
  const promiseThen = Promise.prototype.then;
  const apply = Reflect.apply;
  const StringCtor = String;
  const ErrorCtor = Error;
  const MapCtor = Map;
  const mapGet = Map.prototype.get;
  const mapSet = Map.prototype.set;
  const mapDelete = Map.prototype.delete;
  const mapValues = Map.prototype.values;
  const arrayPush = Array.prototype.push;
  const arraySort = Array.prototype.sort;
  const waitAsync = Atomics.waitAsync;
  const SharedArrayBufferCtor = SharedArrayBuffer;
  const Int32ArrayCtor = Int32Array;
  const dateNow = Date.now;
  const TypeErrorCtor = TypeError;
  // Names the script in stack traces ("at inner (scheduled-script.js:1:40)").
  const SOURCE_URL = "\n//# sourceURL=scheduled-script.js";

  let outputLimitBytes = 0;
  let outputBytes = 0;
  let output = "";
  let truncated = false;

  function utf8Bytes(codePoint) {
    if (codePoint < 0x80) return 1;
    if (codePoint < 0x800) return 2;
    if (codePoint < 0x10000) return 3;
    return 4;
  }

  // The longest prefix of s (cut on a code point) whose UTF-8 encoding fits in maxBytes.
  function prefixWithin(s, maxBytes) {
    let bytes = 0;
    let i = 0;
    while (i < s.length) {
      const cp = s.codePointAt(i);
      const n = utf8Bytes(cp);
      if (bytes + n > maxBytes) break;
      bytes += n;
      i += cp > 0xffff ? 2 : 1;
    }
    return { text: s.slice(0, i), bytes: bytes, whole: i >= s.length };
  }

  function show(value) {
    if (typeof value === "string") return value;
    if (value instanceof ErrorCtor) {
      try { return StringCtor(value.stack || value); } catch (e) { return "[unprintable error]"; }
    }
    try {
      const json = stringify(value);
      if (json !== undefined) return json;
    } catch (e) { /* fall through to String() */ }
    try { return StringCtor(value); } catch (e) { return "[unprintable]"; }
  }

  function write(prefix, args) {
    if (truncated) return;
    let line = prefix;
    for (let i = 0; i < args.length; i++) line += (i ? " " : "") + show(args[i]);
    line += "\n";
    const room = outputLimitBytes - outputBytes;
    // A UTF-16 code unit never encodes to fewer than one byte, so anything beyond `room`
    // units cannot fit; cutting first keeps a huge line from costing a full scan.
    const candidate = line.length > room ? line.slice(0, room) : line;
    const fit = prefixWithin(candidate, room);
    output += fit.text;
    outputBytes += fit.bytes;
    if (!fit.whole || candidate.length < line.length) truncated = true;
  }

  const console = freeze({
    log: function log(...args) { write("", args); },
    info: function info(...args) { write("", args); },
    warn: function warn(...args) { write("[warn] ", args); },
    error: function error(...args) { write("[error] ", args); },
  });
  defineProperty(g, "console", {
    value: console, writable: false, enumerable: false, configurable: false,
  });


  // ----- timers (see the module doc for the rules) -----
  const timers = new MapCtor();  // id -> {id, due, seq, handler, args, repeat, gen}
  let nextTimerId = 1;
  let nextTimerSeq = 0;

  function wake(id, gen) {
    const forced = apply(mapGet, timers, [id]);
    const now = apply(dateNow, null, []);
    const due = [];
    const pending = apply(mapValues, timers, []);
    for (const timer of pending) {
      if (timer.due <= now || (timer === forced && timer.gen === gen)) {
        apply(arrayPush, due, [timer]);
      }
    }
    apply(arraySort, due, [function (a, b) { return a.due - b.due || a.seq - b.seq; }]);
    for (let i = 0; i < due.length; i++) {
      const timer = due[i];
      if (apply(mapGet, timers, [timer.id]) !== timer) continue;  // cleared by an earlier one
      if (timer.repeat === null) apply(mapDelete, timers, [timer.id]);
      else arm(timer, timer.repeat);
      try {
        if (typeof timer.handler === "function") apply(timer.handler, g, timer.args);
        else indirectEval(StringCtor(timer.handler));
      } catch (thrown) {
        write("[error] Uncaught ", [thrown]);
      }
    }
  }

  function arm(timer, delayMs) {
    timer.due = apply(dateNow, null, []) + delayMs;
    timer.seq = nextTimerSeq++;
    const gen = ++timer.gen;
    const view = new Int32ArrayCtor(new SharedArrayBufferCtor(4));
    // A zero timeout makes waitAsync answer synchronously; the smallest positive one still
    // queues a task, which is what setTimeout(fn, 0) means in a browser.
    const waiting = apply(waitAsync, Atomics, [view, 0, 0, delayMs > 0 ? delayMs : 1e-6]);
    apply(promiseThen, waiting.value, [function () { wake(timer.id, gen); }]);
  }

  function addTimer(handler, delay, args, repeating) {
    if (handler === undefined) throw new TypeErrorCtor("timer handler is required");
    let delayMs = delay | 0;
    if (delayMs < 0) delayMs = 0;
    const timer = { id: nextTimerId++, due: 0, seq: 0, handler: handler, args: args,
                    repeat: repeating ? delayMs : null, gen: 0 };
    setPrototypeOf(timer, null);
    apply(mapSet, timers, [timer.id, timer]);
    arm(timer, delayMs);
    return timer.id;
  }

  function clearTimer(id) {
    apply(mapDelete, timers, [id]);
  }

  const timerGlobals = {
    setTimeout: function setTimeout(handler, delay, ...args) {
      return addTimer(handler, delay, args, false);
    },
    setInterval: function setInterval(handler, delay, ...args) {
      return addTimer(handler, delay, args, true);
    },
    clearTimeout: function clearTimeout(id) { clearTimer(id); },
    clearInterval: function clearInterval(id) { clearTimer(id); },
  };
  const timerNames = getOwnPropertyNames(timerGlobals);
  // Plain assignment: mini-racer declared setTimeout/clearTimeout with `var` (non-configurable).
  for (let i = 0; i < timerNames.length; i++) g[timerNames[i]] = timerGlobals[timerNames[i]];

  function deepFreeze(value) {
    if (value !== null && typeof value === "object") {
      const names = getOwnPropertyNames(value);
      for (let i = 0; i < names.length; i++) deepFreeze(value[names[i]]);
      freeze(value);
    }
    return value;
  }

  // The outcome carries the console output as it stood when the completion value settled, so
  // Python never has to call into the isolate again: a timer the script left spinning cannot
  // hold up its report (disposing of the isolate stops it).
  function withOutput(outcome) {
    setPrototypeOf(outcome, null);  // before the assignments: no inherited setter runs
    outcome.output = output;
    outcome.truncated = truncated;
    return plainJson(outcome);
  }

  // The harness's own records lose their prototype before JSON.stringify: a script that
  // defines Object.prototype.toJSON (or a setter on it) must not rewrite the outcome that
  // reports it.
  function plainJson(record) {
    setPrototypeOf(record, null);
    return stringify(record);
  }

  function describeThrown(thrown) {
    let message;
    try { message = StringCtor(thrown); } catch (e) { message = "[unprintable thrown value]"; }
    let stack = null;
    try {
      if (thrown !== null && typeof thrown === "object" && typeof thrown.stack === "string") {
        stack = thrown.stack;
      }
    } catch (e) { stack = null; }
    return withOutput({ ok: false, message: message, stack: stack });
  }

  function describeValue(value) {
    let json;
    try {
      json = stringify(value);
    } catch (e) {
      let why;
      try { why = StringCtor(e && e.message); } catch (e2) { why = "unknown"; }
      return withOutput({ ok: true, json: null,
        note: "completion value is not JSON-serializable: " + why });
    }
    if (json === undefined) {
      const note = value === undefined ? null
        : "completion value is not JSON-serializable (" + typeof value + ")";
      return withOutput({ ok: true, json: null, note: note });
    }
    return withOutput({ ok: true, json: json });
  }

  function isThenable(value) {
    try {
      return value !== null && (typeof value === "object" || typeof value === "function") &&
        typeof value.then === "function";
    } catch (e) {
      return false;
    }
  }

  return {
    install: function install(scheduledJson, limitBytes) {
      outputLimitBytes = limitBytes;
      defineProperty(g, "scheduled", {
        value: deepFreeze(parse(scheduledJson)),
        writable: false, enumerable: true, configurable: false,
      });
    },
    run: function run(code) {
      let value;
      try {
        value = indirectEval(code + SOURCE_URL);
      } catch (thrown) {
        return describeThrown(thrown);
      }
      if (!isThenable(value)) return describeValue(value);
      return new PromiseCtor(function (resolve) {
        apply(promiseThen, promiseResolve(value), [
          function (settled) { resolve(describeValue(settled)); },
          function (thrown) { resolve(describeThrown(thrown)); },
        ]);
      });
    },
    drain: function drain() {
      return plainJson({ output: output, truncated: truncated });
    },
  };
})()
"""
