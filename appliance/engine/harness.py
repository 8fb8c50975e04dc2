"""The JavaScript that the child installs in every fresh isolate before it receives work.

Evaluating HARNESS_JS yields an object of functions that Python keeps as handles; nothing of the
harness is reachable from the global object except ``console``, the timer functions (and, once
a run starts, ``scheduled``, and with egress the web-fetch family below). The harness captures
the built-ins it relies on (JSON.stringify, eval, Promise's then, Atomics.waitAsync, ...) before
any script runs, so a script that replaces them only affects itself — and only for its own run:
every execution gets a new isolate.

The functions Python calls (appliance/engine/sandbox.py):

- ``bind(doorbell)``, when the isolate is built (idle): keeps ``doorbell``, a JS function that
  notifies Python.
- ``start()`` with ``this`` a JSON string ``{code, scheduled, output_limit_bytes, fetch}``:
  defines the deeply frozen, non-writable, non-configurable global ``scheduled``, arms the
  console budget and, when ``fetch``, defines ``fetch``, ``Headers``, ``Response``,
  ``AbortController``, ``AbortSignal`` and ``DOMException``; then evaluates the script as a
  global script (indirect eval keeps completion-value semantics) and returns a *take record*
  (below); when the completion value is a promise or thenable the record has no outcome yet and
  the outcome comes later through ``take``. (``install(scheduledJson, limitBytes, bell,
  fetchEnabled)`` and ``run(code)`` do the same in two steps, for a plain mini-racer context.)
- ``take()``: returns and clears what happened since the last call, as a JSON take record
  ``{out, truncated, requests, aborts, outcome}``: ``out`` is the console text written since,
  ``requests`` the fetch calls made since (in call order), ``aborts`` the ids of requests the
  script aborted since, ``outcome`` the settled completion (once) or null.
- ``deliver()`` with ``this`` a JSON string ``{id, response}`` or ``{id, error: {name,
  message}}``: settles the promise of fetch call ``id``.

Python calls ``take`` and ``deliver`` with no arguments (data travels as ``this``), which is what
lets it talk to a running script without ever blocking on it (sandbox.py, "Why no arguments").
The harness rings ``doorbell`` — once, until the next ``take`` — when there is something to take:
console text, a fetch request or abort, or the outcome. After the outcome, console writes are
ignored (output a leftover timer would write later is not part of the report).

Everything handed to Python is a JSON string made by JSON.stringify, which escapes a lone
surrogate as ``\\udXXX``: mini-racer cannot convert a JS string holding one (it hangs on the
UTF-8 decode). Python then applies the one replacement rule (text.py). The harness's own records
have no prototype (arrays included), so a script that defines ``toJSON`` or a setter on
``Object.prototype`` or ``Array.prototype`` cannot rewrite what it reports.

Timers follow the HTML rules that matter to a script: ``setTimeout(handler, delay, ...args)``
and ``setInterval`` convert the delay like WebIDL ``long`` (``delay | 0``: missing, NaN,
Infinity and out-of-range values become 0) and clamp a negative one to 0; the handler always
runs asynchronously, in a later task, never inside the call; timers fire in order of due time,
then of creation; a string handler is evaluated as global code; ``clearTimeout`` and
``clearInterval`` share one id space and ignore unknown ids. An exception thrown by a handler is
written to the console as an ``[error] Uncaught ...`` line and the other timers keep running.
Timers still pending when the script's completion value settles never run: the isolate is
disposed.

The web-fetch family (only with an ``egress`` section in the worker config) follows the Fetch
standard where a script can tell: ``fetch(input, init)`` returns a promise and rejects — never
throws — on bad arguments (a ``TypeError``), on a denied or failed request (a ``TypeError`` whose
message is the gate's, naming the policy's reason for a denial) and on an abort (the signal's
reason, by default a ``DOMException`` named ``AbortError``). Only ``http:`` and ``https:`` URLs;
``method`` (normalised like the standard), ``headers`` (a ``Headers``, pairs or a record),
``body`` (a string: ``JSON.stringify`` a value first), ``signal`` and ``redirect`` (``manual``
by default). A ``Response`` has ``ok``, ``status``, ``statusText``, ``url``, ``redirected``,
``headers`` (read-only ``Headers``), ``bodyUsed``, ``text()`` and ``json()``.
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
  const objectKeys = Object.keys;
  const PromiseCtor = Promise;
  const promiseResolve = Promise.resolve.bind(Promise);
  const promiseReject = Promise.reject.bind(Promise);
  const promiseThen = Promise.prototype.then;
  const apply = Reflect.apply;
  const StringCtor = String;
  const ErrorCtor = Error;
  const TypeErrorCtor = TypeError;
  const SyntaxErrorCtor = SyntaxError;
  const MapCtor = Map;
  const mapGet = Map.prototype.get;
  const mapSet = Map.prototype.set;
  const mapHas = Map.prototype.has;
  const mapDelete = Map.prototype.delete;
  const mapValues = Map.prototype.values;
  const WeakMapCtor = WeakMap;
  const weakGet = WeakMap.prototype.get;
  const weakSet = WeakMap.prototype.set;
  const arrayPush = Array.prototype.push;
  const arraySort = Array.prototype.sort;
  const isArray = Array.isArray;
  const regexpTest = RegExp.prototype.test;
  const stringLower = String.prototype.toLowerCase;
  const stringUpper = String.prototype.toUpperCase;
  const stringReplace = String.prototype.replace;
  const waitAsync = Atomics.waitAsync;
  const SharedArrayBufferCtor = SharedArrayBuffer;
  const Int32ArrayCtor = Int32Array;
  const dateNow = Date.now;
  const symbolIterator = Symbol.iterator;
  // Names the script in stack traces ("at inner (scheduled-script.js:1:40)").
  const SOURCE_URL = "\n//# sourceURL=scheduled-script.js";

  // A list with no prototype: appending defines own elements (no inherited setter runs) and
  // JSON.stringify still writes it as an array.
  function newList() { const list = []; setPrototypeOf(list, null); return list; }
  function listAppend(list, value) {
    defineProperty(list, list.length, {
      value: value, writable: true, enumerable: true, configurable: true,
    });
  }
  function newRecord() { const record = {}; setPrototypeOf(record, null); return record; }

  let doorbell = null;
  let rung = false;
  let quiet = false;  // inside run(): its own return value carries everything
  // Tell Python there is something to take; once until it takes.
  function ring() {
    if (rung || quiet || doorbell === null) return;
    rung = true;
    try { apply(doorbell, undefined, []); } catch (e) { /* Python is going away */ }
  }

  // ----- console -----
  let outputLimitBytes = 0;
  let outputBytes = 0;
  let pendingOutput = "";
  let truncated = false;
  let settled = false;

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
    if (truncated || settled) return;
    let line = prefix;
    for (let i = 0; i < args.length; i++) line += (i ? " " : "") + show(args[i]);
    line += "\n";
    const room = outputLimitBytes - outputBytes;
    // A UTF-16 code unit never encodes to fewer than one byte, so anything beyond `room`
    // units cannot fit; cutting first keeps a huge line from costing a full scan.
    const candidate = line.length > room ? line.slice(0, room) : line;
    const fit = prefixWithin(candidate, room);
    pendingOutput += fit.text;
    outputBytes += fit.bytes;
    if (!fit.whole || candidate.length < line.length) truncated = true;
    ring();
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


  // ----- the web-fetch family (installed only with egress) -----
  class DOMException extends ErrorCtor {
    constructor(message, name) {
      super(message === undefined ? "" : StringCtor(message));
      defineProperty(this, "name", {
        value: name === undefined ? "Error" : StringCtor(name),
        writable: true, enumerable: false, configurable: true,
      });
    }
    get code() {
      if (this.name === "AbortError") return 20;
      if (this.name === "TimeoutError") return 23;
      return 0;
    }
  }

  function abortError() { return new DOMException("This operation was aborted", "AbortError"); }

  const signals = new WeakMapCtor();  // AbortSignal -> its private state
  let constructingSignal = false;

  class AbortSignal {
    constructor() {
      if (!constructingSignal) throw new TypeErrorCtor("Illegal constructor");
      const state = newRecord();
      state.aborted = false;
      state.reason = undefined;
      state.listeners = newList();
      state.onabort = null;
      apply(weakSet, signals, [this, state]);
    }
    get aborted() { return signalState(this).aborted; }
    get reason() { return signalState(this).reason; }
    get onabort() { return signalState(this).onabort; }
    set onabort(handler) {
      signalState(this).onabort = typeof handler === "function" ? handler : null;
    }
    throwIfAborted() {
      const state = signalState(this);
      if (state.aborted) throw state.reason;
    }
    addEventListener(type, listener, options) {
      if (StringCtor(type) !== "abort" || typeof listener !== "function") return;
      const state = signalState(this);
      for (let i = 0; i < state.listeners.length; i++) {
        if (state.listeners[i] !== null && state.listeners[i].fn === listener) return;
      }
      const once = options !== null && typeof options === "object" && !!options.once;
      const entry = newRecord();
      entry.fn = listener;
      entry.once = once;
      listAppend(state.listeners, entry);
    }
    removeEventListener(type, listener) {
      if (StringCtor(type) !== "abort") return;
      const state = signalState(this);
      for (let i = 0; i < state.listeners.length; i++) {
        if (state.listeners[i] !== null && state.listeners[i].fn === listener) {
          state.listeners[i] = null;
        }
      }
    }
    static abort(reason) {
      const signal = newSignal();
      signalAbort(signal, reason);
      return signal;
    }
    static timeout(milliseconds) {
      const signal = newSignal();
      timerGlobals.setTimeout(function () {
        signalAbort(signal, new DOMException("The operation timed out.", "TimeoutError"));
      }, milliseconds);
      return signal;
    }
  }

  function newSignal() {
    constructingSignal = true;
    try { return new AbortSignal(); } finally { constructingSignal = false; }
  }

  function signalState(signal) {
    const state = apply(weakGet, signals, [signal]);
    if (state === undefined) throw new TypeErrorCtor("not an AbortSignal");
    return state;
  }

  function isSignal(value) {
    return value !== null && typeof value === "object" &&
      apply(weakGet, signals, [value]) !== undefined;
  }

  // The abort steps: mark, then run the internal reactions (fetch) and the script's listeners.
  function signalAbort(signal, reason) {
    const state = signalState(signal);
    if (state.aborted) return;
    state.aborted = true;
    state.reason = reason === undefined ? abortError() : reason;
    const event = newRecord();
    event.type = "abort";
    event.target = signal;
    const listeners = state.listeners;
    state.listeners = newList();
    for (let i = 0; i < listeners.length; i++) {
      const entry = listeners[i];
      if (entry === null) continue;
      try { apply(entry.fn, signal, [event]); } catch (thrown) {
        write("[error] Uncaught ", [thrown]);
      }
    }
    if (state.onabort !== null) {
      try { apply(state.onabort, signal, [event]); } catch (thrown) {
        write("[error] Uncaught ", [thrown]);
      }
    }
  }

  const controllers = new WeakMapCtor();  // AbortController -> its signal

  class AbortController {
    constructor() { apply(weakSet, controllers, [this, newSignal()]); }
    get signal() { return controllerSignal(this); }
    abort(reason) { signalAbort(controllerSignal(this), reason); }
  }

  function controllerSignal(controller) {
    const signal = apply(weakGet, controllers, [controller]);
    if (signal === undefined) throw new TypeErrorCtor("not an AbortController");
    return signal;
  }

  // RFC 9110 token: header names and methods.
  const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
  const BAD_VALUE = /[\0\r\n]/;
  const EDGE_WHITESPACE = /^[\t\n\r ]+|[\t\n\r ]+$/g;

  function headerName(name) {
    const text = StringCtor(name);
    if (!apply(regexpTest, TOKEN, [text])) {
      throw new TypeErrorCtor("invalid header name: " + stringify(text));
    }
    return apply(stringLower, text, []);
  }

  function headerValue(value) {
    const text = apply(stringReplace, StringCtor(value), [EDGE_WHITESPACE, ""]);
    if (apply(regexpTest, BAD_VALUE, [text])) {
      throw new TypeErrorCtor("invalid header value: it holds NUL, CR or LF");
    }
    return text;
  }

  const headerLists = new WeakMapCtor();  // Headers -> {list: [[name, value], ...], immutable}

  function headersState(headers) {
    const state = apply(weakGet, headerLists, [headers]);
    if (state === undefined) throw new TypeErrorCtor("not a Headers object");
    return state;
  }

  function mutableState(headers) {
    const state = headersState(headers);
    if (state.immutable) throw new TypeErrorCtor("these headers are immutable");
    return state;
  }

  function removeHeader(state, name) {
    const kept = newList();
    for (let i = 0; i < state.list.length; i++) {
      if (state.list[i][0] !== name) listAppend(kept, state.list[i]);
    }
    state.list = kept;
  }

  function pair(name, value) {
    const entry = newList();
    listAppend(entry, name);
    listAppend(entry, value);
    return entry;
  }

  function fillHeaders(headers, init) {
    if (init === undefined || init === null) return;
    if (typeof init !== "object" && typeof init !== "function") {
      throw new TypeErrorCtor("headers must be a Headers object, a list of pairs or a record");
    }
    if (apply(weakGet, headerLists, [init]) !== undefined) {
      const source = headersState(init).list;
      for (let i = 0; i < source.length; i++) headers.append(source[i][0], source[i][1]);
      return;
    }
    if (typeof init[symbolIterator] === "function") {
      for (const entry of init) {
        if (entry === null || typeof entry !== "object" || entry.length !== 2) {
          throw new TypeErrorCtor("each header pair must have exactly two items");
        }
        headers.append(entry[0], entry[1]);
      }
      return;
    }
    const names = objectKeys(init);
    for (let i = 0; i < names.length; i++) headers.append(names[i], init[names[i]]);
  }

  class Headers {
    constructor(init) {
      const state = newRecord();
      state.list = newList();
      state.immutable = false;
      apply(weakSet, headerLists, [this, state]);
      fillHeaders(this, init);
    }
    append(name, value) {
      const state = mutableState(this);
      listAppend(state.list, pair(headerName(name), headerValue(value)));
    }
    set(name, value) {
      const state = mutableState(this);
      const key = headerName(name);
      const text = headerValue(value);
      removeHeader(state, key);
      listAppend(state.list, pair(key, text));
    }
    delete(name) { removeHeader(mutableState(this), headerName(name)); }
    get(name) {
      const key = headerName(name);
      const list = headersState(this).list;
      let found = null;
      for (let i = 0; i < list.length; i++) {
        if (list[i][0] === key) found = found === null ? list[i][1] : found + ", " + list[i][1];
      }
      return found;
    }
    has(name) { return this.get(name) !== null; }
    forEach(callback, thisArg) {
      const entries = combinedEntries(this);
      for (let i = 0; i < entries.length; i++) {
        apply(callback, thisArg, [entries[i][1], entries[i][0], this]);
      }
    }
    *entries() {
      const e = combinedEntries(this);
      for (let i = 0; i < e.length; i++) yield [e[i][0], e[i][1]];
    }
    *keys() {
      const e = combinedEntries(this);
      for (let i = 0; i < e.length; i++) yield e[i][0];
    }
    *values() {
      const e = combinedEntries(this);
      for (let i = 0; i < e.length; i++) yield e[i][1];
    }
    [Symbol.iterator]() { return this.entries(); }
  }

  // Sorted by name, values of one name combined: what iterating Headers gives in a browser.
  function combinedEntries(headers) {
    const list = headersState(headers).list;
    const names = newList();
    for (let i = 0; i < list.length; i++) {
      let seen = false;
      for (let j = 0; j < names.length; j++) if (names[j] === list[i][0]) seen = true;
      if (!seen) listAppend(names, list[i][0]);
    }
    apply(arraySort, names, []);
    const entries = newList();
    for (let i = 0; i < names.length; i++) {
      listAppend(entries, pair(names[i], headers.get(names[i])));
    }
    return entries;
  }

  const bodies = new WeakMapCtor();  // Response -> {text, used, status, statusText, url, ...}
  let constructingResponse = null;

  class Response {
    constructor(body, init) {
      const state = newRecord();
      if (constructingResponse !== null) {
        const source = constructingResponse;
        state.text = source.text;
        state.status = source.status;
        state.statusText = source.statusText;
        state.url = source.url;
        state.redirected = source.redirected;
        state.headers = source.headers;
      } else {
        const options = init === undefined || init === null ? newRecord() : init;
        const status = options.status === undefined ? 200 : options.status | 0;
        if (status < 200 || status > 599) {
          throw new RangeError("status must be within 200..599");
        }
        state.text = body === undefined || body === null ? "" : StringCtor(body);
        state.status = status;
        state.statusText = options.statusText === undefined ? "" : StringCtor(options.statusText);
        state.url = "";
        state.redirected = false;
        state.headers = new Headers(options.headers);
      }
      state.used = false;
      headersState(state.headers).immutable = true;
      apply(weakSet, bodies, [this, state]);
    }
    get status() { return responseState(this).status; }
    get ok() { const s = responseState(this).status; return s >= 200 && s <= 299; }
    get statusText() { return responseState(this).statusText; }
    get url() { return responseState(this).url; }
    get redirected() { return responseState(this).redirected; }
    get type() { return "basic"; }
    get headers() { return responseState(this).headers; }
    get bodyUsed() { return responseState(this).used; }
    text() {
      let state;
      try { state = consume(this); } catch (e) { return promiseReject(e); }
      return promiseResolve(state.text);
    }
    json() {
      let state;
      try { state = consume(this); } catch (e) { return promiseReject(e); }
      try { return promiseResolve(parse(state.text)); } catch (e) { return promiseReject(e); }
    }
  }

  function responseState(response) {
    const state = apply(weakGet, bodies, [response]);
    if (state === undefined) throw new TypeErrorCtor("not a Response");
    return state;
  }

  function consume(response) {
    const state = responseState(response);
    if (state.used) throw new TypeErrorCtor("body has already been used");
    state.used = true;
    return state;
  }

  function makeResponse(fields) {
    const headers = new Headers();
    const list = fields.headers;
    for (let i = 0; i < list.length; i++) {
      listAppend(headersState(headers).list, pair(StringCtor(list[i][0]), StringCtor(list[i][1])));
    }
    constructingResponse = {
      text: StringCtor(fields.body), status: fields.status | 0,
      statusText: StringCtor(fields.statusText), url: StringCtor(fields.url),
      redirected: !!fields.redirected, headers: headers,
    };
    try { return new Response(); } finally { constructingResponse = null; }
  }

  const FORBIDDEN_METHODS = ["CONNECT", "TRACE", "TRACK"];
  const NORMALISED_METHODS = ["DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT"];
  const REDIRECT_MODES = ["manual", "follow", "error"];
  const HTTP_URL = /^https?:\/\/[^\s]+$/i;

  function includes(list, value) {
    for (let i = 0; i < list.length; i++) if (list[i] === value) return true;
    return false;
  }

  function normaliseMethod(method) {
    if (method === undefined) return "GET";
    const text = StringCtor(method);
    if (!apply(regexpTest, TOKEN, [text])) {
      throw new TypeErrorCtor("invalid method: " + stringify(text));
    }
    const upper = apply(stringUpper, text, []);
    if (includes(FORBIDDEN_METHODS, upper)) throw new TypeErrorCtor("forbidden method: " + upper);
    return includes(NORMALISED_METHODS, upper) ? upper : text;
  }

  // fetch(input, init) as plain values; every problem is a TypeError (the promise rejects).
  function fetchRequest(input, init) {
    const options = init === undefined || init === null ? newRecord() : init;
    if (typeof options !== "object") throw new TypeErrorCtor("init must be an object");
    const url = StringCtor(input);
    if (!apply(regexpTest, HTTP_URL, [url])) {
      throw new TypeErrorCtor("fetch supports only absolute http: and https: URLs, not " +
        stringify(url.length > 200 ? url.slice(0, 200) + "..." : url));
    }
    const method = normaliseMethod(options.method);
    const headers = new Headers(options.headers);
    let body = null;
    if (options.body !== undefined && options.body !== null) {
      if (typeof options.body !== "string") {
        throw new TypeErrorCtor("body must be a string (JSON.stringify a value first)");
      }
      if (method === "GET" || method === "HEAD") {
        throw new TypeErrorCtor("a " + method + " request cannot have a body");
      }
      body = options.body;
    }
    const redirect = options.redirect === undefined ? "manual" : StringCtor(options.redirect);
    if (!includes(REDIRECT_MODES, redirect)) {
      throw new TypeErrorCtor("redirect must be manual, follow or error");
    }
    const signal = options.signal === undefined || options.signal === null ? null : options.signal;
    if (signal !== null && !isSignal(signal)) {
      throw new TypeErrorCtor("signal must be an AbortSignal");
    }
    const request = newRecord();
    request.method = method;
    request.url = url;
    request.headers = headersState(headers).list;
    request.body = body;
    request.redirect = redirect;
    return { request: request, signal: signal };
  }

  let outbox = newList();  // requests made since the last take, in call order
  let aborts = newList();  // ids of requests the script aborted since the last take
  const inFlight = new MapCtor();  // id -> {resolve, reject}
  let nextFetchId = 1;

  function fetch(input, init) {
    return new PromiseCtor(function (resolve, reject) {
      let made;
      try { made = fetchRequest(input, init); } catch (e) { reject(e); return; }
      const signal = made.signal;
      if (signal !== null && signalState(signal).aborted) {
        reject(signalState(signal).reason);
        return;
      }
      const id = nextFetchId++;
      made.request.id = id;
      const waiter = newRecord();
      waiter.resolve = resolve;
      waiter.reject = reject;
      apply(mapSet, inFlight, [id, waiter]);
      listAppend(outbox, made.request);
      if (signal !== null) {
        const entry = newRecord();
        entry.fn = function () {
          if (!apply(mapHas, inFlight, [id])) return;
          apply(mapDelete, inFlight, [id]);
          listAppend(aborts, id);
          ring();
          reject(signalState(signal).reason);
        };
        entry.once = true;
        listAppend(signalState(signal).listeners, entry);
      }
      ring();
    });
  }

  function deliver(text) {
    const message = parse(text);
    const waiter = apply(mapGet, inFlight, [message.id]);
    if (waiter === undefined) return "ignored";  // aborted by the script, or unknown
    apply(mapDelete, inFlight, [message.id]);
    if (message.error !== undefined && message.error !== null) {
      const name = StringCtor(message.error.name);
      const text = StringCtor(message.error.message);
      waiter.reject(name === "AbortError" ? new DOMException(text, "AbortError")
        : new TypeErrorCtor(text));
    } else {
      let response;
      try { response = makeResponse(message.response); } catch (e) {
        waiter.reject(new TypeErrorCtor("malformed response: " + show(e)));
        return "rejected";
      }
      waiter.resolve(response);
    }
    return "delivered";
  }

  const fetchGlobals = {
    fetch: fetch, Headers: Headers, Response: Response, AbortController: AbortController,
    AbortSignal: AbortSignal, DOMException: DOMException,
  };


  // ----- outcome -----
  let outcome = null;

  function settle(record) {
    if (settled) return;
    settled = true;
    outcome = record;
    ring();
  }

  // The harness's own records lose their prototype before JSON.stringify: a script that
  // defines Object.prototype.toJSON (or a setter on it) must not rewrite the record.
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
    const record = newRecord();
    record.ok = false;
    record.message = message;
    record.stack = stack;
    return record;
  }

  function describeValue(value) {
    const record = newRecord();
    record.ok = true;
    record.json = null;
    let json;
    try {
      json = stringify(value);
    } catch (e) {
      let why;
      try { why = StringCtor(e && e.message); } catch (e2) { why = "unknown"; }
      record.note = "completion value is not JSON-serializable: " + why;
      return record;
    }
    if (json === undefined) {
      record.note = value === undefined ? null
        : "completion value is not JSON-serializable (" + typeof value + ")";
      return record;
    }
    record.json = json;
    return record;
  }

  function isThenable(value) {
    try {
      return value !== null && (typeof value === "object" || typeof value === "function") &&
        typeof value.then === "function";
    } catch (e) {
      return false;
    }
  }

  function setUp(scheduledValue, limitBytes, fetchEnabled) {
    outputLimitBytes = limitBytes;
    defineProperty(g, "scheduled", {
      value: deepFreeze(scheduledValue),
      writable: false, enumerable: true, configurable: false,
    });
    if (fetchEnabled) {
      const names = getOwnPropertyNames(fetchGlobals);
      for (let i = 0; i < names.length; i++) {
        defineProperty(g, names[i], {
          value: fetchGlobals[names[i]], writable: true, enumerable: false, configurable: true,
        });
      }
    }
  }

  function runScript(source) {
    quiet = true;
    try {
      let value;
      try {
        value = indirectEval(StringCtor(source) + SOURCE_URL);
      } catch (thrown) {
        settle(describeThrown(thrown));
        return take();
      }
      if (!isThenable(value)) {
        settle(describeValue(value));
        return take();
      }
      apply(promiseThen, promiseResolve(value), [
        function (result) { settle(describeValue(result)); },
        function (thrown) { settle(describeThrown(thrown)); },
      ]);
      return take();
    } finally {
      quiet = false;
    }
  }

  function take() {
    rung = false;
    const record = newRecord();
    record.out = pendingOutput;
    record.truncated = truncated;
    record.requests = outbox;
    record.aborts = aborts;
    record.outcome = outcome;
    pendingOutput = "";
    outbox = newList();
    aborts = newList();
    outcome = null;
    return plainJson(record);
  }

  return {
    bind: function bind(bell) {
      doorbell = typeof bell === "function" ? bell : null;
    },
    install: function install(scheduledJson, limitBytes, bell, fetchEnabled) {
      if (bell !== undefined) doorbell = typeof bell === "function" ? bell : null;
      setUp(parse(scheduledJson), limitBytes, fetchEnabled === true);
    },
    run: function run(code) {
      return runScript(arguments.length > 0 ? code : this);
    },
    start: function start() {
      const config = parse(StringCtor(this));
      setUp(config.scheduled, config.output_limit_bytes, config.fetch === true);
      return runScript(config.code);
    },
    take: take,
    deliver: function () { return deliver(StringCtor(this)); },
  };
})()
"""
