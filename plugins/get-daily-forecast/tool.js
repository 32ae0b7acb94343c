// `get_daily_forecast`: a daily forecast behind one tool call, sculpted from
// two backend calls: geocode the city, then fetch the days at its coordinates.
//
// Backend API (see tests/fake-weather for the reference implementation):
// - GET {backend-url}/v1/geocode?name=CITY →
//   {"results": [{"name", "country", "latitude", "longitude"}]}
// - GET {backend-url}/v1/daily?latitude=LAT&longitude=LON&days=N →
//   {"daily": [{"day", "high_c", "low_c", "conditions"}]}

import { ToolError, config, http, log, tool } from './plinth_sdk.js';

export const call = tool(async ({ city, days, units = 'celsius' }) => {
  const base = config.require('backend-url').replace(/\/+$/, '');

  const { results } = await getJson(`${base}/v1/geocode?name=${encodeURIComponent(city)}`);
  const place = results[0];
  if (!place) {
    throw new ToolError(`no city called \`${city}\` is known`, {
      additionalPromptContent: "Ask the user to check the city's spelling or to name a nearby larger city.",
    });
  }

  const { daily } = await getJson(
    `${base}/v1/daily?latitude=${place.latitude}&longitude=${place.longitude}&days=${days}`,
  );
  log.debug(`forecast for ${place.name}: ${daily.length} days`);
  const degrees = units === 'fahrenheit' ? (c) => Math.round((c * 9) / 5 + 32) : (c) => Math.round(c);
  return {
    location: `${place.name}, ${place.country}`,
    units,
    forecast: daily.map((d) => ({ day: d.day, high: degrees(d.high_c), low: degrees(d.low_c), conditions: d.conditions })),
  };
});

/** GETs a JSON answer; a backend failure becomes a ToolError the model can act on. */
async function getJson(url) {
  const response = await http.get(url);
  if (!response.ok) {
    // A 5xx from the backend is worth retrying; a 4xx is not.
    const retry = response.status >= 500 ? { canRetry: true, retryAfterMs: 2000 } : {};
    throw new ToolError('the weather service could not answer this request', {
      developerMessage: `backend answered HTTP ${response.status}`,
      ...retry,
    });
  }
  return response.json();
}
