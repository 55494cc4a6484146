"""Agent conversations for training, rendered by the model's own chat template.

One conversation: a system prompt (a role line, sometimes an environment block
and a stretch of unrelated text, as agent CLIs send), tools (tools_pool), a
question about a file's first line, the call the model should make, the
tool's output in one of the shapes agents print, and the answer quoting the
line. A few are title requests with no tools, which agents also send.

Messages are shaped as moelsp's server hands them to the template (system and
developer messages joined by blank lines at the front; a Claude-style user
message's text blocks joined), then rendered by the Qwen3-Coder template with
Jinja2. Loss is on the assistant's tokens only: everything from
"<|im_start|>assistant\\n" to its <|im_end|>.
"""
import json
import random
import string

import jinja2

from tools_pool import tool_set

SPECIAL = ["<|im_start|>", "<|im_end|>"]
ROLES = ["You are a coding agent. Use the tools to answer.", "You are a helpful coding assistant.",
         "You are an agent that works in the user's repository. Use tools to look at files before answering.",
         "You are a coding agent running in a terminal.", "You are a Claude agent, built on Anthropic's Claude Agent SDK.",
         "You are opencode, an interactive CLI tool that helps users with software engineering tasks.",
         "Answer the user's questions about their code. Read files with the tools; never guess their contents."]
QUESTIONS = ["What is the first line of {f}?", "What is the first line of {f}? Read the file, then answer with that line.",
             "Read {f} and tell me its first line.", "What does the first line of {f} say?",
             "Show me the first line of {f}.", "Tell me the first line of the file {f}.",
             "what's the first line in {f}", "Open {f} and print its first line.",
             "I need the first line of {f}. Please read the file."]
DIRS = ["", "", "", "docs/", "src/", "notes/", "config/", "app/", "tmp/", "data/"]
STEMS = ["notes", "README", "todo", "CHANGELOG", "config", "main", "secrets", "hello", "input", "log", "plan",
         "index", "LICENSE", "settings", "words", "data", "story", "names", "list", "message"]
EXTS = [".txt", ".txt", ".txt", ".md", ".py", ".cfg", ".json", ".toml", ".csv", ".log", ".yaml", ".ini", ""]
CONSONANTS = "bcdfghjklmnpqrstvwxz"


def file_name(rng):
    return rng.choice(DIRS) + rng.choice(STEMS) + rng.choice(EXTS)


def random_token(rng):
    pick = rng.random()
    n = rng.randint(3, 14)
    if pick < 0.4:
        return "".join(rng.choice(CONSONANTS) for _ in range(n))
    if pick < 0.6:
        return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))
    if pick < 0.8:
        return "".join(rng.choice(string.ascii_lowercase) for _ in range(n))
    return str(rng.randint(0, 10 ** rng.randint(1, 9)))


# Words of the answer's own phrasing: a line that starts with "The" and says "line" or "is" must
# still be copied from the tool's output, not continued from the answer's opening.
ECHO_WORDS = ["The", "the", "first", "line", "of", "is", "one", "file", "notes"]


def first_line(rng, words, code_lines):
    """A line the model cannot guess: words, random strings, a line of code."""
    if rng.random() < 0.25:
        parts = ["The"] + [rng.choice(ECHO_WORDS if rng.random() < 0.5 else words) for _ in range(rng.randint(2, 6))]
        return " ".join(parts + [random_token(rng)])
    pick = rng.random()
    if pick < 0.45:
        parts = [rng.choice(words) for _ in range(rng.randint(2, 8))]
        parts.insert(rng.randint(0, len(parts)), random_token(rng))
        if rng.random() < 0.5:
            parts.append(random_token(rng))
        line = " ".join(parts)
        return line[0].upper() + line[1:] if rng.random() < 0.6 else line
    if pick < 0.6:
        return random_token(rng) + rng.choice(["", " " + random_token(rng)])
    if pick < 0.8:
        return rng.choice(code_lines)
    return rng.choice(["KEY", "name", "token", "id", "version", "# title", "owner"]) + rng.choice(
        ["=", ": ", " = ", " "]) + random_token(rng)


def file_lines(rng, words, code_lines):
    lines = [first_line(rng, words, code_lines)]
    for _ in range(rng.choice([0, 1, 1, 2, 3, 5, 8, 15])):
        lines.append(rng.choice(code_lines) if rng.random() < 0.5 else " ".join(
            rng.choice(words) for _ in range(rng.randint(1, 9))))
    return lines


def read_output(rng, lines, path, cwd):
    n = len(lines)
    pick = rng.random()
    if pick < 0.25:  # numbered with a tab (cat -n style), ending on the empty line after the last newline
        return "\n".join(f"{i + 1}\t{l}" for i, l in enumerate(lines + [""]))
    if pick < 0.5:
        body = "\n".join(f"{i + 1}: {l}" for i, l in enumerate(lines))
        return (f"<path>{cwd}/{path}</path>\n<type>file</type>\n<content>\n{body}\n\n"
                f"(End of file - total {n} lines)\n</content>")
    if pick < 0.62:
        body = "\n".join(f"{i + 1:05d}| {l}" for i, l in enumerate(lines))
        return f"<file>\n{body}\n\n(End of file - total {n} lines)\n</file>"
    if pick < 0.75:
        return "\n".join(f"{i + 1:>6}\t{l}" for i, l in enumerate(lines))
    return "\n".join(lines) + "\n"


def shell_command(rng, path):
    return rng.choice([f"head -n 1 {path}", f"head -n 1 {path}", f"head -1 {path}", f"cat {path}",
                       f"sed -n 1p {path}"])


def shell_output(rng, lines, command):
    out = "\n".join(lines[:1] if not command.startswith("cat") else lines) + "\n"
    pick = rng.random()
    if pick < 0.45:
        return (f"Chunk ID: {rng.randrange(16 ** 6):06x}\nWall time: {rng.random() / 10:.4f} seconds\n"
                f"Process exited with code 0\nOriginal token count: {max(1, len(out) // 4)}\nOutput:\n{out}")
    if pick < 0.6:
        return json.dumps({"output": out, "metadata": {"exit_code": 0, "duration_seconds": round(rng.random(), 1)}})
    if pick < 0.75:
        return f"Exit code: 0\nOutput:\n{out}"
    return out


def answer(rng, path, line):
    pick = rng.random()
    if pick < 0.4:
        return f"The first line of {path} is:\n\n{line}"
    if pick < 0.5:
        return f"The first line of `{path}` is: {line}"
    if pick < 0.6:
        return f"`{path}` starts with:\n\n```\n{line}\n```"
    return line


def filler(rng, corpus_lines, words, budget_chars):
    """Unrelated text of about budget_chars: instructions, code, prose, as an agent's prompt holds."""
    out, n = [], 0
    while n < budget_chars:
        if rng.random() < 0.5:
            o = rng.randrange(len(corpus_lines))
            chunk = "\n".join(corpus_lines[o:o + rng.randint(3, 30)])
        else:
            chunk = "- " + " ".join(rng.choice(words) for _ in range(rng.randint(6, 30))) + "."
        out.append(chunk)
        n += len(chunk) + 1
    return "\n".join(out)


def env_block(rng, cwd):
    return rng.choice([
        f"<env>\n  Working directory: {cwd}\n  Is directory a git repo: {rng.choice(['no', 'yes'])}\n"
        f"  Platform: linux\n  Today's date: Fri Dec 04 2026\n</env>",
        f"<environment_context>\n  <cwd>{cwd}</cwd>\n  <shell>bash</shell>\n  <current_date>2026-12-04</current_date>\n"
        f"</environment_context>",
        f"Working directory: {cwd}\nPlatform: linux"])


def system_prompt(rng, cwd, corpus_lines, words, filler_text=True):
    parts = []
    if rng.random() < 0.3:
        parts.append(f"x-client-header: cc_version={rng.randint(1, 3)}.{rng.randint(0, 9)}.{rng.randint(0, 300)};")
    parts.append(rng.choice(ROLES))
    size = rng.random()
    budget = 0 if size < 0.45 else rng.randint(50, 1200) if size < 0.85 else rng.randint(1200, 5000)
    budget = budget if filler_text else 0
    if budget:
        parts.append(filler(rng, corpus_lines, words, budget))
    if rng.random() < 0.5:
        parts.append(env_block(rng, cwd))
    if rng.random() < 0.3:
        parts.append("<permissions instructions>\nThe sandbox only permits reading files.\n</permissions instructions>")
    return "\n\n".join(parts)


def call_arguments(rng, name, param, kind, path):
    if kind == "path":
        return {param: path}
    command = shell_command(rng, path)
    if kind == "argv":
        return {param: ["bash", "-lc", command]}
    args = {param: command}
    if name == "bash" and rng.random() < 0.5:
        args["description"] = "Print the first line of " + path
    return args


def tool_round(rng, name, param, kind, cwd, words, code_lines, reminder):
    """A question, the call that answers it, the tool's output and the answer."""
    path = file_name(rng)
    lines = file_lines(rng, words, code_lines)
    question = rng.choice(QUESTIONS).format(f=path)
    if rng.random() < 0.25:
        question = f'"{question}"'
    if reminder:
        question = ("<system-reminder>\nAs you answer the user's questions, you can use the following context:\n"
                    "# currentDate\nToday's date is 2026-12-04.\n</system-reminder>\n\n" + question)
    args = call_arguments(rng, name, param, kind, path)
    if kind == "path":
        result = read_output(rng, lines, path, cwd)
    else:
        result = shell_output(rng, lines, args[param] if kind == "shell" else args[param][-1])
    return [{"role": "user", "content": question},
            {"role": "assistant", "content": "",
             "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}]},
            {"role": "tool", "tool_call_id": "call_1", "name": name, "content": result},
            {"role": "assistant", "content": answer(rng, path, lines[0])}]


def tool_conversation(rng, corpus_lines, words, code_lines, rounds=(1, 1, 2, 2, 3, 4), filler_text=True):
    cwd = "/" + "/".join(rng.choice(["tmp", "home", "work", "src", "agent-work-" + random_token(rng)[:8]])
                         for _ in range(rng.randint(1, 3)))
    tools, (name, param, kind) = tool_set(rng)
    messages = [{"role": "system", "content": system_prompt(rng, cwd, corpus_lines, words, filler_text)}]
    if rng.random() < 0.3:
        messages.append({"role": "user", "content": env_block(rng, cwd)})
    # Several rounds share one prompt: more answers taught per token the prompt costs.
    for i in range(rng.choice(rounds)):
        messages += tool_round(rng, name, param, kind, cwd, words, code_lines, reminder=i == 0 and rng.random() < 0.3)
    return messages, tools


def title_conversation(rng, words):
    path = file_name(rng)
    question = rng.choice(QUESTIONS).format(f=path)
    system = rng.choice(["You are a title generator. You output ONLY a thread title. Nothing else.",
                         "Write a short title (at most 50 characters) for the conversation. Output only the title."])
    title = rng.choice([f"First line of {path}", f"Reading {path}", f"{path} first line"])
    return [{"role": "system", "content": system + "\n\n" + " ".join(rng.choice(words) for _ in range(rng.randint(0, 80)))},
            {"role": "user", "content": "Generate a title for this conversation:\n"},
            {"role": "user", "content": f'"{question}"'},
            {"role": "assistant", "content": title}], []


class Renderer:
    def __init__(self, template_text, sp):
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = lambda v, **_: json.dumps(v, ensure_ascii=False)
        self.template = env.from_string(template_text)
        self.sp = sp
        self.special = {t: sp.piece_to_id(t) for t in SPECIAL}

    def text(self, messages, tools):
        return self.template.render(messages=messages, tools=tools, add_generation_prompt=False)

    def encode(self, text):
        """(ids, loss mask): control tokens by id, the assistant's turns marked for the loss."""
        ids, mask = [], []
        pos, train = 0, False
        while pos < len(text):
            cut = [(text.find(t, pos), t) for t in SPECIAL]
            cut = min(((i, t) for i, t in cut if i >= 0), default=(len(text), None))
            if not train and text.startswith("assistant\n", pos) and text[pos - len("<|im_start|>"):pos] == "<|im_start|>":
                seg = "assistant\n"
                self._add(ids, mask, seg, False)
                pos += len(seg)
                train = True
                continue
            if cut[0] > pos:
                self._add(ids, mask, text[pos:cut[0]], train)
            if cut[1] is None:
                break
            ids.append(self.special[cut[1]])
            mask.append(train)
            if cut[1] == "<|im_end|>":
                train = False
            pos = cut[0] + len(cut[1])
        return ids, mask

    def _add(self, ids, mask, seg, train):
        t = self.sp.encode(seg)
        ids.extend(t)
        mask.extend([train] * len(t))


def weigh_answers(sp, ids, mask, answer_weight):
    """Loss weights: 1 on the assistant's tokens, `answer_weight` on a text answer's (where the line
    is copied), 0 elsewhere."""
    w, i = [float(m) for m in mask], 0
    while i < len(ids):
        if not mask[i]:
            i += 1
            continue
        j = i
        while j < len(ids) and mask[j]:
            j += 1
        if not sp.decode(ids[i:j]).startswith("<tool_call>"):
            w[i:j] = [answer_weight] * (j - i)
        i = j
    return w


def make_rows(renderer, n, rng, corpus_lines, words, code_lines, max_tokens, title_share=0.08,
              rounds=(1, 1, 2, 2, 3, 4), answer_weight=1.0, drill_share=0.0):
    """n rows of (token ids, per-token loss weights), none longer than max_tokens. A drill row
    (drill_share of them) has no unrelated text in its prompt and four to eight rounds: most of
    its tokens are questions, calls, outputs and answers, so copying gets more practice per token."""
    rows, dropped = [], 0
    while len(rows) < n:
        if rng.random() < title_share:
            messages, tools = title_conversation(rng, words)
        elif rng.random() < drill_share:
            messages, tools = tool_conversation(rng, corpus_lines, words, code_lines, (4, 5, 6, 8), filler_text=False)
        else:
            messages, tools = tool_conversation(rng, corpus_lines, words, code_lines, rounds)
        ids, mask = renderer.encode(renderer.text(messages, tools))
        if len(ids) > max_tokens:
            dropped += 1
            continue
        rows.append((ids, weigh_answers(renderer.sp, ids, mask, answer_weight)))
    return rows, dropped
