//! `{{name_snake}}`: greets someone by name. Edit `call` (and the WIT in
//! wit/world.wit, whose doc comments are the tool's signature).

// wit-bindgen passes the input record's fields as one argument each.
#![allow(clippy::too_many_arguments)]

plinth_sdk::tool!("{{name}}");

struct Tool;

impl Guest for Tool {
    fn call(input: Input) -> Result<Output, ToolError> {
        let name = input.name.trim();
        if name.is_empty() {
            return Err(ToolError::new("the name is empty")
                .with_prompt_content("Ask the person for their name, then call the tool again."));
        }
        let hello = match input.tone {
            Some(Tone::Warm) => format!("Hello, {name}! Lovely to meet you!"),
            _ => format!("Hello, {name}."),
        };
        let times = usize::from(input.times.unwrap_or(1));
        Ok(Output { greeting: vec![hello; times].join(" ") })
    }
}

export!(Tool);
