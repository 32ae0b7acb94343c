"""Write Plinth tools in Python (the Python helper replaces this file)."""


class ToolError(Exception):
    """A failure the tool reports to its caller, shaped for an LLM."""

    def __init__(self, message, *, developer_message=None, can_retry=False, retry_after_ms=None,
                 additional_prompt_content=None):
        super().__init__(message)
        self.message = message
        self.developer_message = developer_message
        self.can_retry = can_retry
        self.retry_after_ms = retry_after_ms
        self.additional_prompt_content = additional_prompt_content
