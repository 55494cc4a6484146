"""Tool definitions an agent prompt may carry, written here (names and
parameter names as the common agent CLIs use them; descriptions our own).

Each "reader" can answer "what is line 1 of FILE": a file reader takes a path,
a shell takes a command. The distractors cannot, and several of them look
close (a path parameter, a "read" in the description), so the model has to
pick by what the tool does, not by the first tool listed.
"""
import copy
import random

INT_BOUND = 9007199254740991


def _p(kind, desc, **extra):
    return dict(type=kind, description=desc, **extra)


def _fn(name, desc, props, required):
    return {"type": "function", "function": {"name": name, "description": desc,
                                             "parameters": {"type": "object", "properties": props,
                                                            "required": required}}}


# (name, the parameter that takes the path or command, how to call it, builder)
# kind: "path" (the file's path), "shell" (a command string), "argv" (a command as an argument vector)
def _readers():
    return [
        ("Read", "file_path", "path", lambda r: _fn("Read", r.choice([
            "Reads a file from the local filesystem.", "read files, images, PDFs, notebooks",
            "Read a file. Lines are returned numbered, starting at 1."]), {
            "file_path": _p("string", "The absolute path to the file to read"),
            "offset": _p("integer", "The line number to start reading from. Only provide if the file is too large",
                         minimum=0, maximum=INT_BOUND),
            "limit": _p("integer", "The number of lines to read. Only provide if the file is too large",
                        exclusiveMinimum=0, maximum=INT_BOUND),
            "pages": _p("string", "Page range for PDF files, e.g. \"1-5\".")}, ["file_path"])),
        ("read", "filePath", "path", lambda r: _fn("read", r.choice([
            "Read a file or directory from the local filesystem. If the path does not exist, an error is returned.",
            "Reads a file. Use offset and limit for long files; lines come back prefixed by their number.",
            "Read the contents of a file in the project."]), {
            "filePath": _p("string", "The absolute path to the file or directory to read"),
            "offset": _p("number", "The line number to start reading from (1-indexed)"),
            "limit": _p("number", "The maximum number of lines to read (defaults to 2000)")}, ["filePath"])),
        ("read_file", "path", "path", lambda r: _fn("read_file", "Read the contents of a file.", {
            "path": _p("string", "Path of the file, relative to the workspace root."),
            "start_line": _p("integer", "First line to return (1-based)."),
            "end_line": _p("integer", "Last line to return.")}, ["path"])),
        ("view", "path", "path", lambda r: _fn("view", "View a file or list a directory.", {
            "path": _p("string", "File or directory to view."),
            "view_range": _p("array", "Optional [start, end] line range.", items={"type": "integer"})}, ["path"])),
        ("open_file", "filename", "path", lambda r: _fn("open_file", "Open a text file and return what it holds.", {
            "filename": _p("string", "The file to open.")}, ["filename"])),
        ("exec_command", "cmd", "shell", lambda r: _fn("exec_command", r.choice([
            "Runs a command in a PTY, returning output or a session ID for ongoing interaction.",
            "Run a shell command and return its output."]), {
            "cmd": _p("string", "Shell command to execute."),
            "justification": _p("string", "Why the command needs approval; omit otherwise."),
            "login": _p("boolean", "Request login-shell startup."),
            "max_output_tokens": _p("number", "Output token budget."),
            "sandbox_permissions": _p("string", "Per-command sandbox override.", enum=["use_default", "require_escalated"]),
            "shell": _p("string", "Shell binary to launch."),
            "tty": _p("boolean", "True allocates a PTY for the command."),
            "workdir": _p("string", "Working directory for the command. Defaults to the turn cwd."),
            "yield_time_ms": _p("number", "Wait before yielding output.")}, ["cmd"])),
        ("shell", "command", "argv", lambda r: _fn("shell", "Runs a shell command and returns its output.", {
            "command": _p("array", "The command to execute", items={"type": "string"}),
            "workdir": _p("string", "The working directory to execute the command in"),
            "timeout_ms": _p("number", "The timeout for the command in milliseconds")}, ["command"])),
        ("bash", "command", "shell", lambda r: _fn("bash", r.choice([
            "Executes a given bash command in a persistent shell session with optional timeout.",
            "Run a command in bash and return stdout and stderr."]), {
            "command": _p("string", "The command to execute"),
            "timeout": _p("number", "Optional timeout in milliseconds"),
            "description": _p("string", "Clear, concise description of what this command does in 5-10 words.")},
            ["command"])),
        ("Bash", "command", "shell", lambda r: _fn("Bash", "Executes a given bash command and returns its output.", {
            "command": _p("string", "The command to execute"),
            "timeout": _p("number", "Optional timeout in milliseconds (max 600000)"),
            "description": _p("string", "Clear, concise description of what this command does"),
            "run_in_background": _p("boolean", "Set to true to run this command in the background.")}, ["command"])),
        ("run_shell_command", "command", "shell", lambda r: _fn("run_shell_command", "Executes a shell command.", {
            "command": _p("string", "Exact bash command to execute."),
            "directory": _p("string", "Directory to run the command in, relative to the project root.")},
            ["command"])),
    ]


def _distractors():
    return [
        _fn("write_stdin", "Writes characters to an existing unified exec session and returns recent output.", {
            "session_id": _p("number", "Identifier of the running unified exec session."),
            "chars": _p("string", "Bytes to write to stdin (may be empty to poll)."),
            "yield_time_ms": _p("number", "How long to wait (in milliseconds) for output before yielding.")},
            ["session_id"]),
        _fn("request_user_input", "Request user input for one to three short questions and wait for the response.", {
            "questions": _p("array", "Questions to show the user. Prefer 1 and do not exceed 3",
                            items={"type": "object"})}, ["questions"]),
        _fn("Write", "Writes a file to the local filesystem, replacing what it held.", {
            "file_path": _p("string", "The absolute path to the file to write"),
            "content": _p("string", "The content to write to the file")}, ["file_path", "content"]),
        _fn("write", "Write a file to the local filesystem.", {
            "filePath": _p("string", "The absolute path to the file to write"),
            "content": _p("string", "The content to write to the file")}, ["content", "filePath"]),
        _fn("Edit", "Performs exact string replacements in files.", {
            "file_path": _p("string", "The absolute path to the file to modify"),
            "old_string": _p("string", "The text to replace"),
            "new_string": _p("string", "The text to replace it with")}, ["file_path", "old_string", "new_string"]),
        _fn("edit", "Replace text in a file.", {
            "filePath": _p("string", "The absolute path to the file to modify"),
            "oldString": _p("string", "The text to replace"),
            "newString": _p("string", "The text to replace it with")}, ["filePath", "oldString", "newString"]),
        _fn("Glob", "Fast file pattern matching tool that works with any codebase size.", {
            "pattern": _p("string", "The glob pattern to match files against"),
            "path": _p("string", "The directory to search in.")}, ["pattern"]),
        _fn("grep", "Search file contents with a regular expression.", {
            "pattern": _p("string", "The regex pattern to search for in file contents"),
            "path": _p("string", "The directory to search in."),
            "include": _p("string", "File pattern to include in the search (e.g. \"*.js\")")}, ["pattern"]),
        _fn("list", "Lists files and directories in a given path.", {
            "path": _p("string", "The absolute path to the directory to list"),
            "ignore": _p("array", "List of glob patterns to ignore", items={"type": "string"})}, []),
        _fn("view_image", "View a local image from the filesystem.", {
            "path": _p("string", "Local filesystem path to an image file")}, ["path"]),
        _fn("WebFetch", "Fetches content from a URL and processes it.", {
            "url": _p("string", "The URL to fetch content from"),
            "prompt": _p("string", "The prompt to run on the fetched content")}, ["url", "prompt"]),
        _fn("web_search", "Search the web for a query.", {"query": _p("string", "The search query.")}, ["query"]),
        _fn("update_plan", "Updates the task plan.", {
            "explanation": _p("string", "Why the plan changed."),
            "plan": _p("array", "The list of steps", items={"type": "object"})}, ["plan"]),
        _fn("todowrite", "Create and manage a structured task list for the session.", {
            "todos": _p("array", "The updated todo list", items={"type": "object"})}, ["todos"]),
        _fn("apply_patch", "Apply a patch to files in the workspace.", {
            "input": _p("string", "The entire contents of the apply_patch command")}, ["input"]),
        _fn("get_weather", "Get the current weather for a city.", {
            "location": _p("string", "City and country, e.g. Paris, France"),
            "unit": _p("string", "Temperature unit", enum=["celsius", "fahrenheit"])}, ["location"]),
        _fn("create_goal", "Create a goal for this session.", {
            "objective": _p("string", "What the goal is."),
            "token_budget": _p("integer", "The budget in tokens.")}, ["objective"]),
        _fn("task", "Launch a new agent to handle a complex, multistep task.", {
            "description": _p("string", "A short (3-5 words) description of the task"),
            "prompt": _p("string", "The task for the agent to perform"),
            "subagent_type": _p("string", "The type of specialized agent to use")}, ["description", "prompt"]),
    ]


READERS = _readers()
DISTRACTORS = _distractors()


def tool_set(rng: random.Random):
    """(tools in the order the prompt lists them, the reader's (name, param, kind))."""
    name, param, kind, build = rng.choice(READERS)
    tools = [build(rng)]
    others = [d for d in DISTRACTORS if d["function"]["name"].lower() != name.lower()]
    tools += copy.deepcopy(rng.sample(others, rng.choice([0, 0, 1, 2, 2, 3, 4, 6])))
    rng.shuffle(tools)
    if rng.random() < 0.4:  # JSON-schema extras some clients send (the template prints them)
        for t in tools:
            t["function"]["parameters"]["additionalProperties"] = False
            if rng.random() < 0.5:
                t["function"]["parameters"]["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    if rng.random() < 0.3:  # some clients send a tool without a description
        for t in tools:
            if t["function"]["name"] != name and rng.random() < 0.3:
                del t["function"]["description"]
    return tools, (name, param, kind)
