/**
 * How deeply a JSON text nests, counted on the text without recursion, so that a value too deep
 * for the code that walks it next can be refused before anything recursive touches it (the
 * gateway's ingest, a host's answer check).
 */

/**
 * The deepest nesting of arrays and objects in `text` (JSON; brackets inside strings do not
 * count). A value nested 20,000 deep parses fine but blows the stack of whatever walks it next
 * (structured clone into a Durable Object, a schema validator, JSON.stringify).
 */
export function jsonNestingDepth(text: string): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) max = Math.max(max, ++depth);
    else if (c === 0x5d || c === 0x7d) depth--;
  }
  return max;
}
