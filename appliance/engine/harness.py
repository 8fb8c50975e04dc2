"""The JavaScript that the child installs before it receives work.

Evaluating HARNESS_JS yields an object of three functions that Python keeps as handles; nothing
of the harness is reachable from the global object except ``console`` (and, once a run starts,
``scheduled``). The harness captures the built-ins it relies on (JSON.stringify, eval, Promise's
then) before any script runs, so a script that replaces them only affects itself.

- ``install(scheduledJson, outputLimitBytes)`` defines the deeply frozen, non-writable,
  non-configurable global ``scheduled`` and arms the console budget.
- ``run(code)`` evaluates the script as a global script (indirect eval keeps completion-value
  semantics) and returns a JSON string describing the outcome, or a promise of one when the
  completion value is a promise or thenable.
- ``drain()`` returns the captured console output and its truncated flag as a JSON string.
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
  const defineProperty = Object.defineProperty;
  const getOwnPropertyNames = Object.getOwnPropertyNames;
  const PromiseCtor = Promise;
  const promiseResolve = Promise.resolve.bind(Promise);
  const promiseThen = Promise.prototype.then;
  const apply = Reflect.apply;
  const StringCtor = String;
  const ErrorCtor = Error;
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

  function deepFreeze(value) {
    if (value !== null && typeof value === "object") {
      const names = getOwnPropertyNames(value);
      for (let i = 0; i < names.length; i++) deepFreeze(value[names[i]]);
      freeze(value);
    }
    return value;
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
    return stringify({ ok: false, message: message, stack: stack });
  }

  function describeValue(value) {
    let json;
    try {
      json = stringify(value);
    } catch (e) {
      let why;
      try { why = StringCtor(e && e.message); } catch (e2) { why = "unknown"; }
      return stringify({ ok: true, json: null,
        note: "completion value is not JSON-serializable: " + why });
    }
    if (json === undefined) {
      const note = value === undefined ? null
        : "completion value is not JSON-serializable (" + typeof value + ")";
      return stringify({ ok: true, json: null, note: note });
    }
    return stringify({ ok: true, json: json });
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
      return stringify({ output: output, truncated: truncated });
    },
  };
})()
"""
