// Regenerates tests/data/croner_vectors.json from the reference implementation, croner 11.
//
//   cd tools/croner_vectors && npm install && npm run generate
//
// The JSON is committed test data; the Python tests never run Node. Each case records the next
// `count` fire times (ISO 8601, UTC) strictly after `after`, as croner's Cron#nextRuns returns
// them, plus whether croner accepts a list of expressions (SPEC may reject more than croner).
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";
import { Cron } from "croner";

const here = dirname(fileURLToPath(import.meta.url));
const output = join(here, "..", "..", "tests", "data", "croner_vectors.json");
const pkg = JSON.parse(
  (await import("node:fs")).readFileSync(join(here, "node_modules", "croner", "package.json"), "utf8"),
);

// [note, pattern, timezone, after (ISO with offset), count]
const cases = [
  // America/New_York: spring forward 2025-03-09 02:00 EST -> 03:00 EDT; fall back 2025-11-02 02:00 EDT -> 01:00 EST.
  ["fixed time in the spring gap moves to the end of the gap", "30 2 * * *", "America/New_York", "2025-03-08T12:00:00Z", 4],
  ["fixed time at the exact start of the gap", "0 2 * * *", "America/New_York", "2025-03-08T12:00:00Z", 4],
  ["fixed time right after the gap is unaffected", "0 3 * * *", "America/New_York", "2025-03-08T12:00:00Z", 4],
  ["single-value range counts as fixed time", "30 2-2 * * *", "America/New_York", "2025-03-08T12:00:00Z", 3],
  ["two hours is not fixed time: gap slot skipped", "30 2,3 * * *", "America/New_York", "2025-03-08T12:00:00Z", 5],
  ["interval job skips the spring gap", "*/15 * * * *", "America/New_York", "2025-03-09T06:30:00Z", 8],
  ["interval within the gap hour is skipped that day", "*/20 2 * * *", "America/New_York", "2025-03-08T12:00:00Z", 6],
  ["stepped hour is not fixed time", "30 */24 * * *", "America/New_York", "2025-03-08T12:00:00Z", 3],
  ["fixed time in the fall fold runs once (first instance)", "30 1 * * *", "America/New_York", "2025-11-01T12:00:00Z", 3],
  ["interval job runs in both fold instances", "*/20 * * * *", "America/New_York", "2025-11-02T04:30:00Z", 10],
  ["hourly at :30 runs twice in the fold hour", "30 * * * *", "America/New_York", "2025-11-02T03:00:00Z", 5],
  ["start inside the first fold instance", "*/10 1 * * *", "America/New_York", "2025-11-02T05:25:00Z", 10],
  ["start inside the second fold instance", "*/10 1 * * *", "America/New_York", "2025-11-02T06:25:00Z", 5],
  ["fixed time, start between the two fold instances", "30 1 * * *", "America/New_York", "2025-11-02T05:45:00Z", 2],
  ["every minute across the fold boundary", "* * * * *", "America/New_York", "2025-11-02T05:57:00Z", 6],
  ["every minute across the gap boundary", "* * * * *", "America/New_York", "2025-03-09T06:58:00Z", 4],
  // Europe/Berlin: spring 2025-03-30 02:00 CET -> 03:00 CEST (01:00Z); fall 2025-10-26 03:00 CEST -> 02:00 CET (01:00Z).
  ["Berlin fixed time in the gap", "15 2 * * *", "Europe/Berlin", "2025-03-29T12:00:00Z", 3],
  ["Berlin fixed time in the fold", "15 2 * * *", "Europe/Berlin", "2025-10-25T12:00:00Z", 3],
  ["Berlin interval over the fold", "0,30 2 * * *", "Europe/Berlin", "2025-10-25T12:00:00Z", 6],
  ["Berlin interval over the gap", "0,30 2 * * *", "Europe/Berlin", "2025-03-29T12:00:00Z", 4],
  ["Berlin Sunday fixed time on the fold day", "45 2 * * 0", "Europe/Berlin", "2025-10-20T00:00:00Z", 2],
  // Australia/Lord_Howe: +10:30 / +11, 30-minute shifts. Fall back 2025-04-06 02:00 -> 01:30; spring 2025-10-05 02:00 -> 02:30.
  ["Lord Howe fixed time in the 30-min gap", "15 2 * * *", "Australia/Lord_Howe", "2025-10-04T00:00:00Z", 3],
  ["Lord Howe interval over the 30-min gap", "*/10 2 * * *", "Australia/Lord_Howe", "2025-10-04T00:00:00Z", 8],
  ["Lord Howe fixed time in the 30-min fold", "45 1 * * *", "Australia/Lord_Howe", "2025-04-05T00:00:00Z", 3],
  ["Lord Howe interval over the 30-min fold", "*/15 1 * * *", "Australia/Lord_Howe", "2025-04-05T00:00:00Z", 10],
  ["Lord Howe every minute across the gap", "* * * * *", "Australia/Lord_Howe", "2025-10-04T15:28:00Z", 4],
  // Pacific/Chatham: +12:45 / +13:45. Spring 2025-09-28 02:45 -> 03:45; fall 2025-04-06 03:45 -> 02:45.
  ["Chatham fixed time in the gap", "0 3 * * *", "Pacific/Chatham", "2025-09-26T00:00:00Z", 3],
  ["Chatham interval over the gap", "*/30 2-4 * * *", "Pacific/Chatham", "2025-09-27T00:00:00Z", 8],
  ["Chatham fixed time in the fold", "15 3 * * *", "Pacific/Chatham", "2025-04-04T00:00:00Z", 3],
  ["Chatham interval over the fold", "*/20 3 * * *", "Pacific/Chatham", "2025-04-04T00:00:00Z", 9],
  // America/Santiago: midnight shifts. Fall 2025-04-06 00:00 -04... back to 2025-04-05 23:00; spring 2025-09-07 00:00 -> 01:00.
  ["Santiago midnight job on the spring day moves to 01:00", "0 0 * * *", "America/Santiago", "2025-09-05T12:00:00Z", 3],
  ["Santiago 00:30 job on the spring day moves to 01:00", "30 0 * * *", "America/Santiago", "2025-09-05T12:00:00Z", 3],
  ["Santiago interval in the midnight gap", "*/30 0 * * *", "America/Santiago", "2025-09-05T12:00:00Z", 6],
  ["Santiago 23:30 fixed in the fold runs once", "30 23 * * *", "America/Santiago", "2025-04-04T12:00:00Z", 3],
  ["Santiago interval over the fold before midnight", "*/30 23 * * *", "America/Santiago", "2025-04-04T12:00:00Z", 7],
  ["Santiago every minute across the fold", "* * * * *", "America/Santiago", "2025-04-06T02:58:00Z", 4],
  // Australia/Sydney (southern hemisphere): fall 2025-04-06 03:00 -> 02:00; spring 2025-10-05 02:00 -> 03:00.
  ["Sydney fixed time in the gap", "30 2 * * *", "Australia/Sydney", "2025-10-03T12:00:00Z", 3],
  ["Sydney fixed time in the fold", "30 2 * * *", "Australia/Sydney", "2025-04-04T12:00:00Z", 3],
  ["Sydney interval over the fold", "0,30 2 * * *", "Australia/Sydney", "2025-04-04T12:00:00Z", 6],
  ["Sydney interval over the gap", "0,30 2 * * *", "Australia/Sydney", "2025-10-03T12:00:00Z", 4],
  // Irregular shifts: a whole skipped date (Apia 2011), 2-hour shifts (Troll), midnight (Havana).
  ["a gap that swallows a whole local date skips a fixed-time job that day", "0 12 * * *", "Pacific/Apia", "2011-12-28T00:00:00Z", 3],
  ["interval job across a skipped local date", "0 */6 * * *", "Pacific/Apia", "2011-12-29T00:00:00Z", 6],
  ["two-hour gap, fixed time", "30 1 * * *", "Antarctica/Troll", "2025-03-29T12:00:00Z", 3],
  ["two-hour fold, fixed time", "30 2 * * *", "Antarctica/Troll", "2025-10-25T12:00:00Z", 3],
  ["two-hour fold, interval job", "0 1-2 * * *", "Antarctica/Troll", "2025-10-25T12:00:00Z", 6],
  ["Havana midnight gap, fixed time", "0 0 * * *", "America/Havana", "2025-03-08T12:00:00Z", 3],
  // Calendar rules (no DST involved).
  ["day-of-month OR day-of-week when both are restricted", "0 0 13 * 5", "UTC", "2025-01-01T00:00:00Z", 8],
  ["day-of-week only when day-of-month is *", "0 0 * * 5", "UTC", "2025-01-01T00:00:00Z", 4],
  ["day-of-month only when day-of-week is *", "0 0 13 * *", "UTC", "2025-01-01T00:00:00Z", 4],
  ["*/1 in day-of-month is not a star: OR with day-of-week", "0 12 */1 * 1", "UTC", "2025-01-01T00:00:00Z", 4],
  ["a spelled-out full week is not a star: OR makes every day match", "0 12 1 * 0-6", "UTC", "2025-01-01T00:00:00Z", 4],
  ["stepped day-of-month OR day-of-week", "0 12 1-31/10 * 3", "UTC", "2025-01-01T00:00:00Z", 8],
  ["Sunday as 7", "0 12 * * 7", "UTC", "2025-01-01T00:00:00Z", 3],
  ["Sunday as 0", "0 12 * * 0", "UTC", "2025-01-01T00:00:00Z", 3],
  ["weekday range ending at 7", "0 9 * * 5-7", "UTC", "2025-01-01T00:00:00Z", 6],
  ["ranges and steps", "1-30/7 */6 * * *", "UTC", "2025-01-01T00:00:00Z", 10],
  ["lists and ranges in day-of-month", "0 0 1,15,20-25 * *", "UTC", "2025-01-01T00:00:00Z", 10],
  ["business hours every 15 minutes", "5-59/15 9-17 * 1-6 1-5", "UTC", "2025-06-27T16:00:00Z", 8],
  ["leap day", "0 0 29 2 *", "UTC", "2025-01-01T00:00:00Z", 3],
  ["31st only in long months", "0 0 31 * *", "UTC", "2025-01-01T00:00:00Z", 7],
  ["yearly across a leap year", "0 0 1 1 *", "UTC", "2025-06-01T00:00:00Z", 3],
  ["step as large as the field", "*/60 */24 * * *", "UTC", "2025-01-01T00:00:00Z", 3],
  ["weekday step", "0 0 * * */2", "UTC", "2025-01-01T00:00:00Z", 6],
  ["month step", "0 0 1 */5 *", "UTC", "2025-01-01T00:00:00Z", 4],
  ["leap day OR Monday in a zone", "0 8 29 2 1", "Asia/Kolkata", "2027-02-20T00:00:00Z", 5],
  ["fixed offset zone", "0 9 * * *", "Etc/GMT+5", "2025-01-01T00:00:00Z", 3],
  ["every minute in a half-hour zone", "* * * * *", "Asia/Kolkata", "2025-01-01T00:00:30.500Z", 3],
];

// Whether croner accepts an expression. Where croner accepts what SPEC rejects, SPEC wins.
const acceptance = [
  "* * * * *", "5/15 * * * *", "*/0 * * * *", "*/61 * * * *", "*/60 * * * *", "0 0 * * */8",
  "0 0 * * */7", "5-1 * * * *", "0 0 * * 7-1", "0 0 * * JAN", "0 0 * JAN *", "0 0 * * MON",
  "@daily", "0 0 0 * * *", "0 0 L * *", "0 0 15W * *", "0 0 * * 5#2", "0 0 ? * *", "60 * * * *",
  "0 24 * * *", "0 0 0 * *", "0 0 32 * *", "0 0 * 0 *", "0 0 * 13 *", "0 0 * * 8", "0 0 31 2 *",
  "0 0 30 2 *", "0 0 1,,2 * *", "0 0 1, * *", "/5 * * * *", "0 0 0059 * *", "1-60 * * * *",
];

const vectors = cases.map(([note, pattern, timezone, after, count]) => {
  const job = new Cron(pattern, { timezone });
  const runs = job.nextRuns(count, new Date(after)).map((d) => d.toISOString().replace(".000Z", "Z"));
  return { note, pattern, timezone, after, count, next: runs };
});

const accepts = acceptance.map((pattern) => {
  try {
    const job = new Cron(pattern, { timezone: "UTC" });
    const next = job.nextRuns(1, new Date("2025-01-01T00:00:00Z"));
    return { pattern, croner_accepts: true, croner_fires: next.length > 0 };
  } catch (error) {
    return { pattern, croner_accepts: false, croner_error: String(error.message ?? error) };
  }
});

const document = {
  generator: "tools/croner_vectors/generate.mjs",
  croner_version: pkg.version,
  cases: vectors,
  acceptance: accepts,
};
writeFileSync(output, JSON.stringify(document, null, 2) + "\n");
console.log(`wrote ${vectors.length} cases and ${accepts.length} acceptance checks to ${output}`);
