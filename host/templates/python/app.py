"""`{{name_snake}}`: greets someone by name. Edit `call` (and the WIT in
wit/world.wit, whose doc comments are the tool's signature)."""

import wit_world
from wit_world import Input, Output, Tone

from plinth_sdk import ToolError, tool


class WitWorld(wit_world.WitWorld):
    @tool
    def call(self, input: Input) -> Output:
        name = input.name.strip()
        if not name:
            raise ToolError(
                "the name is empty",
                additional_prompt_content="Ask the person for their name, then call the tool again.",
            )
        if input.tone == Tone.WARM:
            hello = f"Hello, {name}! Lovely to meet you!"
        else:
            hello = f"Hello, {name}."
        return Output(greeting=" ".join([hello] * (input.times or 1)))
