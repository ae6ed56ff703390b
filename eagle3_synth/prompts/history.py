"""A generated assistant turn as the history message a serving stack hands back for it.

On-policy conversations feed each generated turn back as history, so the next prompt is what the
model sees when served: the server's reasoning and tool-call parsers (here SGLang 0.5.23's,
`sglang/srt/parser/reasoning_parser.py`, `sglang/srt/function_call/`; each parser names the function
it follows) turn the output into a message, which the template renders. Text only, never the data
path: the split comes from the boundary columns, each piece between markers is decoded with the
markers around it, whose text is then cut off (an edge token may hold merged text, DSML's `>` +
newline), and only the inside of one call is parsed, in its family's layout.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from eagle3_synth.contract.markers import Marker, find_marker
from eagle3_synth.contract.row import reasoning_end
from eagle3_synth.contract.profiles import MarkerIds, ModelProfile

Tools = Sequence[Mapping[str, Any]] | None
Parsed = tuple[str | None, str, str] | None  # (id or None: `call_<n>`, name, arguments JSON); None: no call


def decode_text(tokenizer: Any, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
    """`tokenizer.decode(ids)`; a fast tokenizer gets a numpy array (a list is checked item by item)."""
    if getattr(tokenizer, "is_fast", False):
        import numpy as np

        ids = np.asarray(ids, dtype=np.int64)
    return tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


# -- pieces between markers -------------------------------------------------------------------------

class _Found(NamedTuple):
    first: int  # first token of the marker
    last: int  # last token of the marker (may hold text after the marker, merged into it)
    text: str  # the marker as written in the profile


def _at(ids: Sequence[int], marker: Marker, first: int) -> _Found | None:
    """The marker occurrence that starts at `first` (the longest alternative that matches there)."""
    best = None
    for pattern in marker.alternatives:
        n = len(pattern.slots)
        if first >= 0 and first + n <= len(ids) and all(ids[first + k] in s for k, s in enumerate(pattern.slots)):
            if best is None or n > best.last - best.first + 1:
                best = _Found(first, first + n - 1, pattern.text)
    return best


def _find(ids: Sequence[int], marker: Marker, start: int, stop: int | None = None) -> _Found | None:
    first = find_marker(ids, marker, start, stop)[0] if marker and start >= 0 else -1
    return _at(ids, marker, first) if first >= 0 else None


def _piece(tokenizer: Any, ids: Sequence[int], start: int, stop: int, before: _Found | None = None,
           after: _Found | None = None) -> str:
    """Text of ids[start:stop]; with `before` (the marker starting at stop) and `after` (the marker
    ending at start-1) decoded along and their text cut off, so a merged edge loses nothing."""
    lo = after.first if after else start
    hi = before.last + 1 if before else stop
    text = decode_text(tokenizer, ids[lo:hi]) if hi > lo else ""
    if after:
        at = text.find(after.text)
        text = text[at + len(after.text):] if at >= 0 else decode_text(tokenizer, ids[after.last + 1:hi])
    if before:
        at = text.rfind(before.text)
        text = text[:at] if at >= 0 else text
    return text


# -- schema types for XML-style parameters (the tools the prompt offered) ---------------------------

def _properties(tools: Tools, name: str) -> dict[str, Any]:
    """The parameter schemas of the offered tool `name` (sglang utils.py get_schema_properties)."""
    for tool in tools or ():
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else {}
        if isinstance(fn, Mapping) and fn.get("name") == name and isinstance(fn.get("parameters"), Mapping):
            return dict(fn["parameters"].get("properties") or {})
    return {}


def _schema_type(schema: Any) -> str | None:
    """sglang function_call/utils.py infer_type_from_json_schema, its common cases."""
    if not isinstance(schema, Mapping):
        return None
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((t for t in kind if t != "null"), "string") if kind else None
    if isinstance(kind, str):
        return kind.lower()
    for key in ("anyOf", "oneOf", "allOf"):
        found = {t for t in map(_schema_type, schema.get(key) or []) if t}
        if found:
            return found.pop() if len(found) == 1 else "string"
    return "string" if schema.get("enum") else "object" if "properties" in schema else (
        "array" if "items" in schema else None)


def _typed(value: str, schema: Any, untyped: Callable[[str], Any]) -> Any:
    """A parameter's text typed by its schema as sglang's XML-style parsers do (Qwen3CoderDetector.
    _convert_param_value, MiniMaxM2Detector._convert_param_value_with_types, glm4_moe parse_arguments):
    `null` is null; a string keeps the text; integer, number, boolean, object and array types read the
    value (the text if it does not read); an undeclared or untyped parameter gets `untyped(text)`."""
    kind = _schema_type(schema)
    if value.strip().lower() == "null":
        return None
    if kind is None:
        return untyped(value)
    try:
        if kind.startswith(("int", "uint", "long", "short", "unsigned")):
            return int(value)
        if kind.startswith(("num", "float", "double")):
            number = float(value)
            return int(number) if number.is_integer() and not re.search(r"[.eE]", value) else number
        if kind in ("boolean", "bool", "binary") and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        if kind in ("object", "array", "arr") or kind.startswith(("dict", "list")):
            return json.loads(value)
    except (ValueError, OverflowError):
        pass
    return value


def _json_or_literal(value: str) -> Any:
    """glm4_moe_detector.py parse_arguments without a type: JSON, then a Python literal, else the text."""
    for read in (json.loads, ast.literal_eval):
        try:
            return read(value)
        except Exception:  # noqa: BLE001 - sglang keeps the text whatever fails
            continue
    return value


# -- one parser per family: the inside of one call (text between its begin and end markers) ---------

_KIMI_ID = re.compile(r"^(?:functions\.)?(?P<name>[\w.\-]+):(?P<index>\d+)$")


def _kimi_tool(tools: Tools, arguments: str) -> str:
    """sglang KimiK2Detector._infer_tool_name: the only tool, or the one best matching the argument keys."""
    functions = [tool.get("function", tool) for tool in tools or ()]
    if len(functions) == 1:
        return functions[0].get("name", "")
    try:
        keys = set(json.loads(arguments))
    except (ValueError, TypeError):
        return ""
    scores = [(len(keys & set(props)) - len(keys - set(props)), fn.get("name", "")) for fn in functions
              if (props := (fn.get("parameters") or {}).get("properties"))]
    return max((s for s in scores if s[0] >= 0), key=lambda s: s[0], default=(0, ""))[1]


def _kimi(body: str, tools: Tools) -> Parsed:
    # sglang function_call/kimik2_detector.py KimiK2Detector.detect_and_parse (tool_call_regex,
    # _parse_tool_call_id). The id is the model's own `functions.NAME:IDX`, as the template renders
    # it; a bare counter id ("3") names no function: it is inferred from the tools, as sglang does.
    call_id, sep, arguments = body.partition("<|tool_call_argument_begin|>")
    if not sep:
        return None
    match = _KIMI_ID.match(call_id.strip())
    return call_id.strip(), match.group("name") if match else _kimi_tool(tools, arguments.strip()), arguments.strip()


def _json_members(text: str) -> dict[str, str]:
    """The top-level members of a JSON object as the raw text of each value ({} if not an object)."""
    decoder, space, members = json.JSONDecoder(), re.compile(r"\s*"), {}
    i = space.match(text).end()
    if text[i:i + 1] != "{":
        return {}
    i = space.match(text, i + 1).end()
    while text[i:i + 1] not in ("}", ""):
        key, i = decoder.raw_decode(text, i)
        i = space.match(text, i).end()
        if text[i:i + 1] != ":":
            return {}
        start = space.match(text, i + 1).end()
        _, i = decoder.raw_decode(text, start)
        members[key] = text[start:i]
        i = space.match(text, i).end()
        if text[i:i + 1] == ",":
            i = space.match(text, i + 1).end()
    return members


def _qwen(body: str, tools: Tools) -> Parsed:
    # sglang function_call/qwen25_detector.py Qwen25Detector.detect_and_parse + base_format_detector.py
    # parse_base_json: `{"name", "arguments"}` (or "parameters"). sglang re-dumps the arguments with
    # json.dumps(ensure_ascii=False); here they are the text the model wrote (same JSON value).
    try:
        parsed = json.loads(body)
        members = _json_members(body.strip())
    except ValueError:
        return None
    if not isinstance(parsed, dict) or not parsed.get("name"):
        return None
    key = "parameters" if parsed.get("parameters") else "arguments"
    arguments = members.get(key) or json.dumps(parsed.get(key, {}), ensure_ascii=False)
    return None, str(parsed["name"]), arguments


_CODER_FUNCTION = re.compile(r"<function=(.*?)</function>|<function=(.*)$", re.DOTALL)
_CODER_PARAMETER = re.compile(r"<parameter=(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$)", re.DOTALL)


def _qwen3_coder(body: str, tools: Tools) -> Parsed:
    # sglang function_call/qwen3_coder_detector.py Qwen3CoderDetector.detect_and_parse: values are
    # strings unless the offered tool's schema types them (without tools: strings, "null" is null).
    match = _CODER_FUNCTION.search(body)
    inside = (match.group(1) or match.group(2)) if match else ""
    if ">" not in inside:
        return None
    name, _, params = inside.partition(">")
    schema, arguments = _properties(tools, name), {}
    for item in _CODER_PARAMETER.findall(params):
        if ">" in item:
            key, _, value = item.partition(">")
            arguments[key] = _typed(value.removeprefix("\n").removesuffix("\n"), schema.get(key), str)
    return None, name, json.dumps(arguments, ensure_ascii=False)


def _deepseek(body: str, tools: Tools) -> Parsed:
    # R1/V3: sglang function_call/deepseekv3_detector.py DeepSeekV3Detector.detect_and_parse
    # (`function<｜tool▁sep｜>NAME\n```json\nARGS\n````); V3.1: deepseekv31_detector.py
    # DeepSeekV31Detector.detect_and_parse (`NAME<｜tool▁sep｜>ARGS`). sglang re-dumps ARGS with
    # json.dumps; here they are the text the model wrote.
    r1 = re.fullmatch(r"(.*)<｜tool▁sep｜>(.*)\n```json\n(.*)\n```\s*", body, re.DOTALL)
    if r1:
        return None, r1.group(2).strip(), r1.group(3).strip()
    name, sep, arguments = body.partition("<｜tool▁sep｜>")
    return (None, name.strip(), arguments.strip()) if sep else None


_DSML_INVOKE = re.compile(r'\s+name="(?P<name>[^"]+)"\s*>(?P<body>.*)\Z', re.DOTALL)
_DSML_PARAMETER = re.compile(r'<｜DSML｜parameter\s+name="([^"]+)"\s+string="([^"]+)"\s*>(.*?)</｜DSML｜parameter>', re.S)
_NO_NAN = {"parse_constant": int}  # NaN / Infinity raise ValueError, as sglang's _reject_json_constant


def _dsml(body: str, tools: Tools) -> Parsed:
    # sglang function_call/deepseekv32_detector.py DeepSeekV32Detector._parse_parameters_from_xml (V4:
    # deepseekv4_detector.py, the same with `tool_calls`): string="true" values stripped, others
    # parsed as JSON (kept as a string if they are not), or a JSON object as the whole body.
    match = _DSML_INVOKE.match(body)
    if not match:
        return None
    inside = match.group("body").strip()
    try:
        if inside.startswith("{"):
            arguments = json.loads(inside, **_NO_NAN)
            if not isinstance(arguments, dict):
                return None
        else:
            arguments = {}
            for key, is_string, value in _DSML_PARAMETER.findall(inside):
                try:
                    arguments[key] = value.strip() if is_string == "true" else json.loads(value.strip(), **_NO_NAN)
                except ValueError:
                    arguments[key] = value.strip()
    except ValueError:
        return None
    return None, match.group("name").strip(), json.dumps(arguments, ensure_ascii=False)


def _harmony(body: str, tools: Tools) -> Parsed:
    # sglang function_call/gpt_oss_detector.py GptOssDetector._extract_tool_call_from_event: the name
    # from `to=functions.NAME` (its last dotted part), the arguments the message body (sglang
    # re-dumps them with json.dumps; here they are the text the model wrote).
    header, sep, arguments = body.partition("<|message|>")
    name = re.match(r"[^\s<]*", header).group(0)
    if not sep or not name:
        return None
    return None, name.split(".")[-1], arguments.strip()


_GLM_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>(?:\\n|\s)*<arg_value>(.*?)</arg_value>", re.DOTALL)


def _glm(body: str, tools: Tools) -> Parsed:
    # sglang function_call/glm4_moe_detector.py Glm4MoeDetector.detect_and_parse: the name is the
    # first line, then <arg_key>/<arg_value> pairs, typed by the tool's schema or read as JSON.
    match = re.match(r"(.*?)(?:\\n|\n)(.*)\Z", body, re.DOTALL)
    name, pairs = (match.group(1), match.group(2)) if match else (body, "")
    if not name.strip():
        return None
    schema = _properties(tools, name.strip())
    arguments = {key.strip(): _typed(value, schema.get(key.strip()), _json_or_literal)
                 for key, value in _GLM_PAIR.findall(pairs)}
    return None, name.strip(), json.dumps(arguments, ensure_ascii=False)


_MINIMAX_PARAMETER = re.compile(r'<parameter name="(.*?)</parameter>|<parameter name="(.*?)$', re.DOTALL)


def _minimax(body: str, tools: Tools) -> Parsed:
    # sglang function_call/minimax_m2.py MiniMaxM2Detector._parse_block / _parse_parameter: the body
    # follows `<invoke name=`; values are strings unless the offered tool's schema types them.
    text = body[1:] if body.startswith('"') else body
    if '">' not in text:
        return None
    name, _, params = text.partition('">')
    schema, arguments = _properties(tools, name.strip()), {}
    for match in _MINIMAX_PARAMETER.findall(params):
        item = match[0] or match[1]
        if '">' in item:
            key, _, value = item.partition('">')
            arguments[key.strip()] = _typed(value.strip("\n"), schema.get(key.strip(), {"type": "string"}), str)
    return None, name.strip(), json.dumps(arguments, ensure_ascii=False)


PARSERS: dict[str, Callable[[str, Tools], Parsed]] = {
    "kimi_k2": _kimi, "qwen3": _qwen, "qwen3_coder": _qwen3_coder, "deepseek": _deepseek,
    "deepseek_dsml": _dsml, "gpt_oss": _harmony, "glm45": _glm, "minimax_m2": _minimax,
}


def _harmony_messages(text: str) -> tuple[list[str], list[str]]:
    """(normal texts, analysis texts) of the harmony messages in `text`, as sglang harmony_parser.py
    CanonicalStrategy._parse_block reads them: final and commentary messages are content."""
    normal, analysis = [], []
    for chunk in text.split("<|start|>"):
        header, sep, rest = chunk.partition("<|message|>")
        if not sep:
            continue
        body = re.split(r"<\|(?:end|return|call)\|>", rest, maxsplit=1)[0]
        channel = header.partition("<|channel|>")[2].strip().lower()
        (analysis if channel.startswith("analysis") else normal).append(body)
    return normal, analysis


# -- the message ------------------------------------------------------------------------------------

def _columns(boundaries: Any) -> tuple[int, int, int, int, list[tuple[int, int]]]:
    """The boundary columns of a `Boundaries` or of a row (a mapping with the contract's columns)."""
    get = boundaries.__getitem__ if isinstance(boundaries, Mapping) else lambda key: getattr(boundaries, key)
    calls = [(c["start"], c["end"]) if isinstance(c, Mapping) else (c.start, c.end) for c in get("tool_calls")]
    return get("reasoning_start"), get("think_end"), get("response_start"), get("stop_index"), calls


def history_message(output_ids: Sequence[int], boundaries: Any, tokenizer: Any, markers: MarkerIds,
                    profile: ModelProfile, *, tools: Tools = None, first_call_index: int = 0) -> dict[str, Any]:
    """The assistant message a serving stack's reasoning and tool-call parsers return for an output.

    `boundaries`: the row's boundary columns (`contract.row.find_boundaries`, or a row);
    `tools`: the tools the prompt offered (they type XML-style parameters, as in sglang). Returns
    `{"role": "assistant", "content", <profile.reasoning_field>, "tool_calls"}`: reasoning and content
    stripped, the content ending where the first call (or its section) begins, no stop token or
    section marker in any text, `tool_calls` left out without calls (templates test for the key),
    a call cut off (`end == -1`) left out. `arguments` is a JSON string: as the model wrote it for
    JSON-style calls, built as the family's parser builds it for XML-style ones; ids as the parser
    makes them (Kimi: the model's own `functions.NAME:IDX`; else `call_<n>` from `first_call_index`).

    A profile without a parser here (a user's --profile-file family): reasoning and content split by
    the boundaries, each complete call kept as its raw text (between its markers) in `arguments`,
    with name "".
    """
    ids = output_ids if isinstance(output_ids, list) else list(output_ids)
    reasoning_start, think_end, response_start, stop_index, spans = _columns(boundaries)
    stop = stop_index if stop_index >= 0 else len(ids)  # the stop token is in no text
    section = markers.tool_section_begin
    reasoning = ""
    if reasoning_start >= 0:
        opened = _find(ids, markers.reasoning_open, 0, reasoning_start) if reasoning_start > 0 else None
        end = reasoning_end(think_end, response_start, stop)
        closing = _at(ids, markers.reasoning_close, think_end) if think_end >= 0 else (
            _at(ids, section, end) or _at(ids, markers.tool_call_begin, end) if response_start >= 0 else None)
        reasoning = _piece(tokenizer, ids, reasoning_start, end, closing,
                           opened if opened and opened.last + 1 == reasoning_start else None)
    spans = [(s, e) for s, e in spans if response_start >= 0 and s >= response_start]
    content, extra = "", []
    if response_start >= 0:
        cut = _find(ids, section, response_start, spans[0][0] if spans else None) if section else None
        if cut is None and spans:
            cut = _at(ids, markers.tool_call_begin, spans[0][0])
        harmony = profile.name == "gpt_oss"  # the response is messages, read with their end tokens
        content = _piece(tokenizer, ids, response_start, cut.first if cut else len(ids) if harmony else stop, cut)
        if harmony:
            normal, extra = _harmony_messages(content)
            content = " ".join(part.strip() for part in normal)
    parse = PARSERS.get(profile.name)
    calls = []
    for start, end in spans:
        begin = _at(ids, markers.tool_call_begin, start)
        if end < 0 or begin is None:
            continue
        closing = _find(ids, markers.tool_call_end, begin.last + 1, end + 1)
        body = _piece(tokenizer, ids, begin.last + 1, closing.first if closing else end + 1, closing, begin)
        parsed = parse(body, tools) if parse else None
        call_id, name, arguments = parsed if parsed else (None, "", body)
        calls.append({"id": call_id or f"call_{first_call_index + len(calls)}", "type": "function",
                      "function": {"name": name, "arguments": arguments}})
    message: dict[str, Any] = {"role": "assistant", "content": content.strip(),
                               profile.reasoning_field: (reasoning + "".join(extra)).strip()}
    if calls:
        message["tool_calls"] = calls
    return message
