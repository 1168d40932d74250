import { goQuote } from './go/go-quote.js';

/*
 * logrus's text output and Go's time layouts, without pino: cmp/log.ts builds the process logger
 * on them, and the git askpass helper (cmp/askpass/askpass-helper.ts), which git starts for every
 * prompt, prints its one fatal line with them without loading a logger.
 */

/** Go's time.RFC3339, logrus's default timestamp layout (JSON and text formatters). */
export const RFC3339 = '2006-01-02T15:04:05Z07:00';

/** logrus's TextFormatter needsQuoting: anything beyond these characters is quoted (Go %q). */
const BARE = /^[A-Za-z0-9\-._/@^+]*$/;

function textValue(v: unknown): string {
  const s = typeof v === 'string' ? v : v === null || typeof v !== 'object' ? String(v) : JSON.stringify(v);
  return BARE.test(s) ? s : goQuote(s);
}

/** One JSON record as logrus's TextFormatter prints it without a terminal: time, level, msg, then the fields sorted. */
export function textLine(line: string): string {
  const { time, level, msg, name: _n, ...rest } = JSON.parse(line) as Record<string, unknown>;
  const head: string[] = [`time=${textValue(time)}`, `level=${textValue(level)}`];
  if (msg !== undefined) head.push(`msg=${textValue(msg)}`);
  for (const k of Object.keys(rest).sort()) head.push(`${k}=${textValue(rest[k])}`);
  return head.join(' ') + '\n';
}

const MONTHS = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October', 'November', 'December'];
const DAYS = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];

// Go's layout elements, longest first where one is the prefix of another (time.nextStdChunk).
const ELEMENT =
  /January|Jan|Monday|Mon|MST|2006|002|__2|_2|01|02|03|04|05|06|15|1|2|3|4|5|PM|pm|Z07:00:00|Z070000|Z07:00|Z0700|Z07|-07:00:00|-070000|-07:00|-0700|-07|[.,](?:0+|9+)(?![0-9])/g;

const pad = (n: number, w = 2) => String(n).padStart(w, '0');

/**
 * Go's `time.Time.Format(layout)` for the process's local time (as logrus stamps entries): the
 * reference time `Mon Jan 2 15:04:05 MST 2006` elements, zone offsets, fractional seconds
 * (`.000` fixed, `.999` trimmed). `MST` prints `UTC` at offset 0, otherwise the offset as Go does
 * for a zone without an abbreviation (`+03`, `-0530`).
 */
export function formatGoTime(d: Date, layout: string): string {
  const offMin = -d.getTimezoneOffset();
  const zone = (z: boolean, colon: boolean, secs: boolean, hoursOnly = false) => {
    if (z && offMin === 0) return 'Z';
    const a = Math.abs(offMin);
    const s = `${offMin < 0 ? '-' : '+'}${pad(Math.floor(a / 60))}`;
    if (hoursOnly) return s;
    return s + (colon ? ':' : '') + pad(a % 60) + (secs ? (colon ? ':' : '') + '00' : '');
  };
  const hour = d.getHours();
  return layout.replace(ELEMENT, el => {
    switch (el) {
      case 'January': return MONTHS[d.getMonth()]!;
      case 'Jan': return MONTHS[d.getMonth()]!.slice(0, 3);
      case 'Monday': return DAYS[d.getDay()]!;
      case 'Mon': return DAYS[d.getDay()]!.slice(0, 3);
      case 'MST': return offMin === 0 ? 'UTC' : offMin % 60 === 0 ? zone(false, false, false, true) : zone(false, false, false);
      case '2006': return pad(d.getFullYear(), 4);
      case '06': return pad(d.getFullYear() % 100);
      case '01': return pad(d.getMonth() + 1);
      case '1': return String(d.getMonth() + 1);
      case '02': return pad(d.getDate());
      case '_2': return String(d.getDate()).padStart(2, ' ');
      case '2': return String(d.getDate());
      case '002':
      case '__2': {
        const day = Math.round((Date.UTC(d.getFullYear(), d.getMonth(), d.getDate()) - Date.UTC(d.getFullYear(), 0, 1)) / 86_400_000) + 1;
        return el === '002' ? pad(day, 3) : String(day).padStart(3, ' ');
      }
      case '15': return pad(hour);
      case '03': return pad(hour % 12 || 12);
      case '3': return String(hour % 12 || 12);
      case '04': return pad(d.getMinutes());
      case '4': return String(d.getMinutes());
      case '05': return pad(d.getSeconds());
      case '5': return String(d.getSeconds());
      case 'PM': return hour >= 12 ? 'PM' : 'AM';
      case 'pm': return hour >= 12 ? 'pm' : 'am';
      case 'Z07:00:00': return zone(true, true, true);
      case 'Z070000': return zone(true, false, true);
      case 'Z07:00': return zone(true, true, false);
      case 'Z0700': return zone(true, false, false);
      case 'Z07': return zone(true, false, false, true);
      case '-07:00:00': return zone(false, true, true);
      case '-070000': return zone(false, false, true);
      case '-07:00': return zone(false, true, false);
      case '-0700': return zone(false, false, false);
      case '-07': return zone(false, false, false, true);
      default: {
        // Fractional seconds: `.000` keeps its width, `.999` drops trailing zeros (and the dot when none is left).
        // Date holds milliseconds; finer digits are zeros.
        const digits = el.length - 1;
        const frac = pad(d.getMilliseconds(), 3).padEnd(9, '0').slice(0, digits);
        if (el[1] === '0') return el[0] + frac;
        const trimmed = frac.replace(/0+$/, '');
        return trimmed ? el[0] + trimmed : '';
      }
    }
  });
}
