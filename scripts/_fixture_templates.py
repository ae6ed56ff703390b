"""Chat templates of the fixture tokenizers (used by ``make_fixture_tokenizers.py``).

Each template is written for these fixtures (none is a copy of a model's file) and rendered by
transformers' sandboxed jinja environment (trim_blocks, lstrip_blocks, ``tojson`` =
``json.dumps(ensure_ascii=False)``, ``raise_exception``, ``strftime_now``; message keys whose value is
None are dropped before rendering). Each one *behaves* like the real model's template in what it
renders and in which message forms it accepts or rejects (see the family notes on each constant and
``tests/test_fixture_templates.py``).
"""

from __future__ import annotations

# DeepSeek (V3.1, llama.cpp's V3.1, R1, V4/DSML) and gpt-oss live in a second module (file length).
from _fixture_templates_deepseek_harmony import (  # noqa: F401
    DEEPSEEK_R1_TEMPLATE,
    DEEPSEEK_V31_TEMPLATE,
    DEEPSEEK_V31_TOJSON_TEMPLATE,
    DEEPSEEK_V4_TEMPLATE,
    GPT_OSS_TEMPLATE,
)

# --------------------------------------------------------------------------------------------------
# Kimi: K2.5 appends <think> to the generation prompt, K2-Thinking does not.

KIMI_K25_TEMPLATE = r"""{#- Kimi-K2.5-style chat template (test fixture). -#}
{%- macro render_content(msg) -%}
{%- set c = msg.get('content') -%}
{%- if c is string -%}{{- c -}}
{%- elif c is iterable and c is not mapping -%}
{%- for part in c -%}{%- if part is mapping and part.get('type') == 'text' -%}{{- part.get('text', '') -}}{%- endif -%}{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{%- if tools -%}
{{- '<|im_system|>tool_declare<|im_middle|>' -}}{{- tools | tojson(separators=(',', ':')) -}}{{- '<|im_end|>' -}}
{%- endif -%}
{%- if not messages or messages[0]['role'] != 'system' -%}
{{- '<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>' -}}
{%- endif -%}
{%- set ns = namespace(last_user=-1) -%}
{%- for m in messages -%}{%- if m['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}
{%- for message in messages -%}
{%- set role = message['role'] -%}
{%- if role == 'user' -%}
{{- '<|im_user|>user<|im_middle|>' -}}{{- render_content(message) -}}
{%- elif role == 'assistant' -%}
{{- '<|im_assistant|>assistant<|im_middle|>' -}}
{#- Past reasoning is dropped; only turns after the last user message keep reasoning_content. -#}
{%- if loop.index0 > ns.last_user and not (thinking is defined and thinking is false) and message.get('reasoning_content') is string -%}
{{- '<think>' + message['reasoning_content'] + '</think>' -}}
{%- else -%}
{{- '<think></think>' -}}
{%- endif -%}
{{- render_content(message) -}}
{%- if message.get('tool_calls') -%}
{{- '<|tool_calls_section_begin|>' -}}
{%- for tc in message['tool_calls'] -%}
{%- set fn = tc.get('function') or tc -%}
{%- set call_id = tc.get('id') or ('functions.' ~ fn.get('name', '') ~ ':' ~ loop.index0) -%}
{%- set args = fn.get('arguments', {}) -%}
{{- '<|tool_call_begin|>' ~ call_id ~ '<|tool_call_argument_begin|>' -}}
{%- if args is string -%}{{- args -}}{%- else -%}{{- args | tojson -}}{%- endif -%}
{{- '<|tool_call_end|>' -}}
{%- endfor -%}
{{- '<|tool_calls_section_end|>' -}}
{%- endif -%}
{%- elif role == 'tool' -%}
{{- '<|im_system|>tool<|im_middle|>## Return of ' ~ (message.get('tool_call_id') or '') ~ '\n' -}}{{- render_content(message) -}}
{%- else -%}
{{- '<|im_system|>' ~ role ~ '<|im_middle|>' -}}{{- render_content(message) -}}
{%- endif -%}
{{- '<|im_end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_assistant|>assistant<|im_middle|>' -}}
{%- if thinking is defined and thinking is false -%}{{- '<think></think>' -}}{%- else -%}{{- '<think>' -}}{%- endif -%}
{%- endif -%}
"""

_K25_HEAD = "{#- Kimi-K2.5-style chat template (test fixture). -#}"
_K25_GEN = ("{%- if thinking is defined and thinking is false -%}{{- '<think></think>' -}}"
            "{%- else -%}{{- '<think>' -}}{%- endif -%}\n")
assert KIMI_K25_TEMPLATE.count(_K25_HEAD) == 1 and KIMI_K25_TEMPLATE.count(_K25_GEN) == 1
# Same as K2.5 except the generation prompt: the model opens its reasoning itself.
KIMI_K2_THINKING_TEMPLATE = KIMI_K25_TEMPLATE.replace(
    _K25_HEAD, "{#- Kimi-K2-Thinking-style chat template (test fixture): no <think> in the generation prompt. -#}"
).replace(_K25_GEN, "")

# --------------------------------------------------------------------------------------------------
# Qwen3: strict about the assistant's content (`message.content` is concatenated as is).

QWEN3_TEMPLATE = r"""{#- Qwen3-style chat template (test fixture). -#}
{%- macro render_content(msg) -%}
{%- set c = msg.get('content') -%}
{%- if c is string -%}{{- c -}}
{%- elif c is iterable and c is not mapping -%}
{%- for part in c -%}{%- if part is mapping and part.get('type') == 'text' -%}{{- part.get('text', '') -}}{%- endif -%}{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{%- set has_system = messages and messages[0]['role'] == 'system' -%}
{%- if tools -%}
{{- '<|im_start|>system\n' -}}
{%- if has_system -%}{{- render_content(messages[0]) + '\n\n' -}}{%- endif -%}
{{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
{%- for tool in tools -%}{{- '\n' -}}{{- tool | tojson -}}{%- endfor -%}
{{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif has_system -%}
{{- '<|im_start|>system\n' + render_content(messages[0]) + '<|im_end|>\n' -}}
{%- endif -%}
{#- The last real user query: turns after it keep their reasoning. -#}
{%- set ns = namespace(last_query=messages | length - 1, searching=true) -%}
{%- for m in messages[::-1] -%}
{%- set idx = (messages | length - 1) - loop.index0 -%}
{%- if ns.searching and m['role'] == 'user' -%}
{%- set text = render_content(m) -%}
{%- if not (text.startswith('<tool_response>') and text.endswith('</tool_response>')) -%}
{%- set ns.searching = false -%}{%- set ns.last_query = idx -%}
{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- for message in messages -%}
{%- set role = message['role'] -%}
{%- if role == 'user' or (role == 'system' and not loop.first) -%}
{{- '<|im_start|>' + role + '\n' + render_content(message) + '<|im_end|>\n' -}}
{%- elif role == 'assistant' -%}
{#- As in Qwen3: read strictly, so a turn without a `content` key fails to render. -#}
{%- set content = message.content -%}
{%- set reasoning = '' -%}
{%- if message.get('reasoning_content') is string -%}
{%- set reasoning = message['reasoning_content'] -%}
{%- elif '</think>' in content -%}
{%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}
{%- set content = content.split('</think>')[-1].lstrip('\n') -%}
{%- endif -%}
{%- if loop.index0 > ns.last_query and (loop.last or reasoning) -%}
{{- '<|im_start|>' + role + '\n<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') -}}
{%- else -%}
{{- '<|im_start|>' + role + '\n' + content -}}
{%- endif -%}
{%- for tc in message.get('tool_calls') or [] -%}
{%- if not loop.first or content -%}{{- '\n' -}}{%- endif -%}
{%- set fn = tc.get('function') or tc -%}
{%- set args = fn.get('arguments', {}) -%}
{{- '<tool_call>\n{"name": "' + fn.get('name', '') + '", "arguments": ' -}}
{%- if args is string -%}{{- args -}}{%- else -%}{{- args | tojson -}}{%- endif -%}
{{- '}\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\n' -}}
{%- elif role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
{{- '\n<tool_response>\n' + render_content(message) + '\n</tool_response>' -}}
{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\n\n</think>\n\n' -}}{%- endif -%}
{%- endif -%}
"""

# Qwen3-Coder: XML tools and calls; arguments must be a mapping (`| items`).
QWEN3_CODER_TEMPLATE = r"""{#- Qwen3-Coder-style chat template (test fixture). -#}
{%- set loop_messages = messages -%}
{%- if messages and messages[0]['role'] == 'system' -%}
{%- set system_message = messages[0]['content'] -%}{%- set loop_messages = messages[1:] -%}
{%- endif -%}
{%- if system_message is defined -%}
{{- '<|im_start|>system\n' + system_message -}}
{%- elif tools -%}
{{- '<|im_start|>system\nYou are Qwen, a helpful AI assistant that can use tools to solve tasks.' -}}
{%- endif -%}
{%- if tools -%}
{{- '\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>' -}}
{%- for tool in tools -%}
{%- set fn = tool.function if tool.function is defined else tool -%}
{{- '\n<function>\n<name>' ~ fn.name ~ '</name>' -}}
{%- if fn.description is defined -%}{{- '\n<description>' ~ (fn.description | trim) ~ '</description>' -}}{%- endif -%}
{{- '\n<parameters>' -}}
{%- if fn.parameters is defined and fn.parameters.properties is defined -%}
{%- for pname, pspec in fn.parameters.properties | items -%}
{{- '\n<parameter>\n<name>' ~ pname ~ '</name>' -}}
{%- if pspec.type is defined -%}{{- '\n<type>' ~ (pspec.type | string) ~ '</type>' -}}{%- endif -%}
{%- if pspec.description is defined -%}{{- '\n<description>' ~ (pspec.description | trim) ~ '</description>' -}}{%- endif -%}
{%- if pspec.enum is defined -%}{{- '\n<enum>' ~ (pspec.enum | tojson) ~ '</enum>' -}}{%- endif -%}
{{- '\n</parameter>' -}}
{%- endfor -%}
{%- if fn.parameters.required is defined -%}{{- '\n<required>' ~ (fn.parameters.required | tojson) ~ '</required>' -}}{%- endif -%}
{%- endif -%}
{{- '\n</parameters>\n</function>' -}}
{%- endfor -%}
{{- '\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n</function>\n</tool_call>\n\nReminder: the <function=...></function> block goes inside <tool_call></tool_call> tags, required parameters must be given, and any reasoning comes BEFORE the call, not after.' -}}
{%- endif -%}
{%- if system_message is defined or tools -%}{{- '<|im_end|>\n' -}}{%- endif -%}
{%- for message in loop_messages -%}
{%- if message.role == 'assistant' and message.tool_calls is defined and message.tool_calls | length > 0 -%}
{{- '<|im_start|>assistant' -}}
{%- if message.content is string and message.content | trim | length > 0 -%}{{- '\n' + message.content | trim + '\n' -}}{%- endif -%}
{%- for tc in message.tool_calls -%}
{%- set fn = tc.function if tc.function is defined else tc -%}
{{- '\n<tool_call>\n<function=' + fn.name + '>\n' -}}
{%- if fn.arguments is defined -%}
{%- for key, value in fn.arguments | items -%}
{{- '<parameter=' + key + '>\n' -}}
{%- if value is mapping or (value is sequence and value is not string) -%}{{- value | tojson -}}{%- else -%}{{- value | string -}}{%- endif -%}
{{- '\n</parameter>\n' -}}
{%- endfor -%}
{%- endif -%}
{{- '</function>\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\n' -}}
{%- elif message.role in ['user', 'system', 'assistant'] -%}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}
{%- elif message.role == 'tool' -%}
{%- if loop.first or loop.previtem.role != 'tool' -%}{{- '<|im_start|>user\n' -}}{%- endif -%}
{{- '<tool_response>\n' + message.content + '\n</tool_response>\n' -}}
{%- if loop.last or loop.nextitem.role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
"""

# --------------------------------------------------------------------------------------------------
# GLM-4.5 and MiniMax-M2: XML-ish calls; arguments must be a mapping (`.items()`).

GLM45_TEMPLATE = r"""{#- GLM-4.5-style chat template (test fixture). -#}
{%- macro visible_text(content) -%}
{%- if content is string -%}{{- content -}}
{%- elif content is iterable and content is not mapping -%}
{%- for part in content -%}{%- if part is mapping and part.type == 'text' -%}{{- part.text -}}{%- elif part is string -%}{{- part -}}{%- endif -%}{%- endfor -%}
{%- else -%}{{- content -}}{%- endif -%}
{%- endmacro -%}
{{- '[gMASK]<sop>' -}}
{%- if tools -%}
{{- '<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n' -}}
{%- for tool in tools -%}{{- tool | tojson -}}{{- '\n' -}}{%- endfor -%}
{{- '</tools>\n\nFor each function call, output the function name and arguments in this XML format:\n<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n...\n</tool_call>' -}}
{%- endif -%}
{%- set ns = namespace(last_user=-1) -%}
{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}
{%- for m in messages -%}
{%- if m.role == 'user' -%}
{%- set text = visible_text(m.content) -%}
{{- '<|user|>\n' + text -}}
{%- if enable_thinking is defined and not enable_thinking and not text.endswith('/nothink') -%}{{- '/nothink' -}}{%- endif -%}
{%- elif m.role == 'assistant' -%}
{{- '<|assistant|>' -}}
{%- set reasoning = '' -%}
{%- set content = visible_text(m.content) -%}
{%- if m.reasoning_content is string -%}
{%- set reasoning = m.reasoning_content -%}
{%- elif '</think>' in content -%}
{%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}
{%- set content = content.split('</think>')[-1].lstrip('\n') -%}
{%- endif -%}
{%- if loop.index0 > ns.last_user and reasoning -%}
{{- '\n<think>' + reasoning.strip() + '</think>' -}}
{%- else -%}
{{- '\n<think></think>' -}}
{%- endif -%}
{%- if content.strip() -%}{{- '\n' + content.strip() -}}{%- endif -%}
{%- for tc in m.tool_calls or [] -%}
{%- set fn = tc.function if tc.function is defined else tc -%}
{{- '\n<tool_call>' + fn.name -}}
{%- for k, v in fn.arguments.items() -%}
{{- '\n<arg_key>' + k + '</arg_key>\n<arg_value>' + (v if v is string else v | tojson) + '</arg_value>' -}}
{%- endfor -%}
{{- '\n</tool_call>' -}}
{%- endfor -%}
{%- elif m.role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|observation|>' -}}{%- endif -%}
{{- '\n<tool_response>\n' + visible_text(m.content) + '\n</tool_response>' -}}
{%- elif m.role == 'system' -%}
{{- '<|system|>\n' + visible_text(m.content) -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|assistant|>' -}}{%- if enable_thinking is defined and not enable_thinking -%}{{- '\n<think></think>' -}}{%- endif -%}
{%- endif -%}
"""

MINIMAX_M2_TEMPLATE = r"""{#- MiniMax-M2-style chat template (test fixture). -#}
{%- macro visible_text(content) -%}
{%- if content is string -%}{{- content -}}
{%- elif content is iterable and content is not mapping -%}
{%- for part in content -%}{%- if part is mapping and part.type == 'text' -%}{{- part.text -}}{%- elif part is string -%}{{- part -}}{%- endif -%}{%- endfor -%}
{%- else -%}{{- content -}}{%- endif -%}
{%- endmacro -%}
{%- set conversation = messages -%}
{%- set system_text = 'You are a helpful assistant.' -%}
{%- if messages and messages[0].role == 'system' -%}
{%- set system_text = visible_text(messages[0].content) -%}{%- set conversation = messages[1:] -%}
{%- endif -%}
{%- set ns = namespace(last_user=-1) -%}
{%- for m in conversation -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}
{{- ']~!b[]~b]system\n' + system_text -}}
{%- if tools -%}
{{- '\n\n# Tools\nYou may call one or more tools to assist with the user query.\nHere are the tools available in JSONSchema format:\n\n<tools>\n' -}}
{%- for tool in tools -%}{{- '<tool>' + ((tool.function if tool.function is defined else tool) | tojson) + '</tool>\n' -}}{%- endfor -%}
{{- '</tools>\n\nWhen making tool calls, use XML format to invoke tools and pass parameters:\n\n<minimax:tool_call>\n<invoke name="tool-name-1">\n<parameter name="param-key-1">param-value-1</parameter>\n...\n</invoke>\n</minimax:tool_call>' -}}
{%- endif -%}
{{- '[e~[\n' -}}
{%- set last_call = namespace(name=none) -%}
{%- for message in conversation -%}
{%- if message.role == 'assistant' -%}
{{- ']~b]ai\n' -}}
{%- set reasoning = '' -%}
{%- set content = visible_text(message.content) -%}
{%- if message.reasoning_content is string -%}
{%- set reasoning = message.reasoning_content -%}
{%- elif '</think>' in content -%}
{%- set reasoning = content.split('</think>')[0].strip('\n').split('<think>')[-1].strip('\n') -%}
{%- set content = content.split('</think>')[-1].strip('\n') -%}
{%- endif -%}
{#- Interleaved thinking: reasoning is kept for the turns after the last user message. -#}
{%- if reasoning and loop.index0 > ns.last_user -%}{{- '<think>\n' + reasoning + '\n</think>\n\n' -}}{%- endif -%}
{{- content -}}
{%- if message.tool_calls -%}
{{- '\n<minimax:tool_call>\n' -}}
{%- for tc in message.tool_calls -%}
{%- set fn = tc.function if tc.function is defined else tc -%}
{{- '<invoke name="' + fn.name + '">\n' -}}
{%- for k, v in fn.arguments.items() -%}
{{- '<parameter name="' + k + '">' + (v if v is string else v | tojson) + '</parameter>\n' -}}
{%- endfor -%}
{{- '</invoke>\n' -}}
{%- set last_call.name = fn.name -%}
{%- endfor -%}
{{- '</minimax:tool_call>' -}}
{%- else -%}
{%- set last_call.name = none -%}
{%- endif -%}
{{- '[e~[\n' -}}
{%- elif message.role == 'tool' -%}
{%- if last_call.name is none -%}
{{- raise_exception('Message has tool role, but there was no previous assistant message with a tool call!') -}}
{%- endif -%}
{%- if loop.first or conversation[loop.index0 - 1].role != 'tool' -%}{{- ']~b]tool' -}}{%- endif -%}
{{- '\n<response>' + visible_text(message.content) + '</response>' -}}
{%- if loop.last or conversation[loop.index0 + 1].role != 'tool' -%}{{- '[e~[\n' -}}{%- endif -%}
{%- elif message.role == 'user' -%}
{{- ']~b]user\n' + visible_text(message.content) + '[e~[\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- ']~b]ai\n<think>\n' -}}{%- endif -%}
"""
