//! `echo`: the smallest useful tool, for smoke tests and benchmarks.

plinth_sdk::tool!("echo");

struct Echo;

impl Guest for Echo {
    fn call(input: Input) -> Result<Output, ToolError> {
        Ok(Output { text: input.text })
    }
}

export!(Echo);
