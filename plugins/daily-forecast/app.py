"""`daily_forecast`: a daily forecast behind one tool call, sculpted from two
backend calls: geocode the city, then fetch the days at its coordinates.
The JavaScript example `plugins/get-daily-forecast` is the same tool.

Backend API (see tests/fake-weather for the reference implementation):
- GET {backend-url}/v1/geocode?name=CITY ->
  {"results": [{"name", "country", "latitude", "longitude"}]}
- GET {backend-url}/v1/daily?latitude=LAT&longitude=LON&days=N ->
  {"daily": [{"day", "high_c", "low_c", "conditions"}]}
"""

import wit_world
from wit_world import DayForecast, Input, Output, TemperatureUnit

from plinth_sdk import ToolError, config, http, log, tool


class WitWorld(wit_world.WitWorld):
    @tool
    def call(self, input: Input) -> Output:
        base = config.require("backend-url").rstrip("/")

        places = get_json(f"{base}/v1/geocode?name={http.quote(input.city)}")["results"]
        if not places:
            raise ToolError(
                f"no city called `{input.city}` is known",
                additional_prompt_content="Ask the user to check the city's spelling or to name a nearby larger city.",
            )
        place = places[0]

        daily = get_json(
            f"{base}/v1/daily?latitude={place['latitude']}&longitude={place['longitude']}&days={input.days}"
        )["daily"]
        log.debug(f"forecast for {place['name']}: {len(daily)} days")
        units = input.units or TemperatureUnit.CELSIUS
        if units == TemperatureUnit.FAHRENHEIT:
            degrees = lambda c: round_half_up(c * 9 / 5 + 32)
        else:
            degrees = round_half_up
        return Output(
            location=f"{place['name']}, {place['country']}",
            units=units,
            forecast=[
                DayForecast(day=d["day"], high=degrees(d["high_c"]), low=degrees(d["low_c"]), conditions=d["conditions"])
                for d in daily
            ],
        )


def get_json(url: str):
    """GETs a JSON answer; a backend failure becomes a ToolError the model can act on."""
    response = http.get(url)
    if not response.ok:
        # A 5xx from the backend is worth retrying; a 4xx is not.
        retry = {"can_retry": True, "retry_after_ms": 2000} if response.status >= 500 else {}
        raise ToolError(
            "the weather service could not answer this request",
            developer_message=f"backend answered HTTP {response.status}",
            **retry,
        )
    return response.json()


def round_half_up(value: float) -> int:
    """Rounds as JavaScript's Math.round does (Python's round() rounds half to even)."""
    import math

    return math.floor(value + 0.5)
