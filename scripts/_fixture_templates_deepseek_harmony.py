"""DeepSeek (V3.1, V3.1 as llama.cpp ships it, R1, V4/DSML) and gpt-oss fixture chat templates.

Re-exported by ``_fixture_templates`` (see its docstring for how the templates are rendered).
"""

from __future__ import annotations

# --------------------------------------------------------------------------------------------------
# DeepSeek V3.1 (as shipped, and as llama.cpp copies it) and R1: tools are never rendered.

_DEEPSEEK_V31_BASE = r"""@HEAD@
{%- if thinking is not defined -%}{%- set thinking = false -%}{%- endif -%}
{%- set ns = namespace(system='', first_sp=true, last_user=false, in_tool=false, first_call=true) -%}
{%- for message in messages -%}
{%- if message['role'] == 'system' -%}
{%- if ns.first_sp -%}{%- set ns.system = message['content'] -%}{%- set ns.first_sp = false -%}
{%- else -%}{%- set ns.system = ns.system + '\n\n' + message['content'] -%}{%- endif -%}
{%- endif -%}
{%- endfor -%}
{{- bos_token + ns.system -}}
{%- for message in messages -%}
{%- if message['role'] == 'user' -%}
{%- set ns.in_tool = false -%}{%- set ns.last_user = true -%}{%- set ns.first_call = true -%}
{{- '<｜User｜>' + message['content'] -}}
{%- elif message['role'] == 'assistant' and message['tool_calls'] is defined -%}
{%- if ns.last_user -%}{{- '<｜Assistant｜></think>' -}}{%- endif -%}
{%- set ns.last_user = false -%}{%- set ns.in_tool = false -%}{%- set ns.first_call = true -%}
{%- for call in message['tool_calls'] -%}
{%- if ns.first_call -%}
{%- if message['content'] is none -%}
{{- '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + call['function']['name'] + '<｜tool▁sep｜>' + @ARGS@ + '<｜tool▁call▁end｜>' -}}
{%- else -%}
{{- @CONTENT@ + '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + call['function']['name'] + '<｜tool▁sep｜>' + @ARGS@ + '<｜tool▁call▁end｜>' -}}
{%- endif -%}
{%- set ns.first_call = false -%}
{%- else -%}
{{- '<｜tool▁call▁begin｜>' + call['function']['name'] + '<｜tool▁sep｜>' + @ARGS@ + '<｜tool▁call▁end｜>' -}}
{%- endif -%}
{%- endfor -%}
{{- '<｜tool▁calls▁end｜><｜end▁of▁sentence｜>' -}}
{%- elif message['role'] == 'assistant' -%}
{%- if ns.last_user -%}{{- '<｜Assistant｜></think>' -}}{%- endif -%}
{%- set ns.last_user = false -%}
{%- if ns.in_tool -%}
{{- @CONTENT@ + '<｜end▁of▁sentence｜>' -}}{%- set ns.in_tool = false -%}
{%- else -%}
{%- set content = @CONTENT@ -%}
{%- if '</think>' in content -%}{%- set content = content.split('</think>', 1)[1] -%}{%- endif -%}
{{- content + '<｜end▁of▁sentence｜>' -}}
{%- endif -%}
{%- elif message['role'] == 'tool' -%}
{%- set ns.last_user = false -%}{%- set ns.in_tool = true -%}
{{- '<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>' -}}
{%- endif -%}
{%- endfor -%}
{#- As in V3.1: no generation prompt after a tool result (the model continues after it). -#}
{%- if add_generation_prompt and ns.last_user and not ns.in_tool -%}
{{- '<｜Assistant｜>' -}}{%- if thinking -%}{{- '<think>' -}}{%- else -%}{{- '</think>' -}}{%- endif -%}
{%- endif -%}
"""

DEEPSEEK_V31_TEMPLATE = (
    _DEEPSEEK_V31_BASE.replace("@HEAD@", "{#- DeepSeek-V3.1-style chat template (test fixture). Tools are never rendered. -#}")
    .replace("@ARGS@", "call['function']['arguments']")
    .replace("@CONTENT@", "message['content']")
)
# The V3.1 template as llama.cpp ships it: arguments through tojson, content with a default.
DEEPSEEK_V31_TOJSON_TEMPLATE = (
    _DEEPSEEK_V31_BASE.replace(
        "@HEAD@", "{#- DeepSeek-V3.1-style chat template, llama.cpp variant (test fixture): tojson arguments. -#}")
    .replace("@ARGS@", "(call['function']['arguments'] | tojson)")
    .replace("@CONTENT@", "(message['content'] | default(''))")
)

DEEPSEEK_R1_TEMPLATE = r"""{#- DeepSeek-R1-style chat template (test fixture). Tools are never rendered. -#}
{#- As in R1, the first-call and first-output flags are set once per conversation, never reset. -#}
{%- set ns = namespace(system='', first_sp=true, in_tool=false, first_call=true, first_output=true) -%}
{%- for message in messages -%}
{%- if message['role'] == 'system' -%}
{%- if ns.first_sp -%}{%- set ns.system = message['content'] -%}{%- set ns.first_sp = false -%}
{%- else -%}{%- set ns.system = ns.system + '\n\n' + message['content'] -%}{%- endif -%}
{%- endif -%}
{%- endfor -%}
{{- bos_token + ns.system -}}
{%- for message in messages -%}
{%- if message['role'] == 'user' -%}
{%- set ns.in_tool = false -%}
{{- '<｜User｜>' + message['content'] -}}
{%- elif message['role'] == 'assistant' and 'tool_calls' in message -%}
{%- set ns.in_tool = false -%}
{%- for call in message['tool_calls'] -%}
{%- if ns.first_call -%}
{%- if message['content'] is none -%}
{{- '<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + call['type'] + '<｜tool▁sep｜>' + call['function']['name'] + '\n```json\n' + call['function']['arguments'] + '\n```<｜tool▁call▁end｜>' -}}
{%- else -%}
{{- '<｜Assistant｜>' + message['content'] + '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + call['type'] + '<｜tool▁sep｜>' + call['function']['name'] + '\n```json\n' + call['function']['arguments'] + '\n```<｜tool▁call▁end｜>' -}}
{%- endif -%}
{%- set ns.first_call = false -%}
{%- else -%}
{{- '\n<｜tool▁call▁begin｜>' + call['type'] + '<｜tool▁sep｜>' + call['function']['name'] + '\n```json\n' + call['function']['arguments'] + '\n```<｜tool▁call▁end｜>' -}}
{%- endif -%}
{%- endfor -%}
{{- '<｜tool▁calls▁end｜><｜end▁of▁sentence｜>' -}}
{%- elif message['role'] == 'assistant' -%}
{%- if ns.in_tool -%}
{{- '<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>' -}}{%- set ns.in_tool = false -%}
{%- else -%}
{%- set content = message['content'] -%}
{%- if '</think>' in content -%}{%- set content = content.split('</think>')[-1] -%}{%- endif -%}
{{- '<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>' -}}
{%- endif -%}
{%- elif message['role'] == 'tool' -%}
{%- set ns.in_tool = true -%}
{%- if ns.first_output -%}
{{- '<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>' -}}{%- set ns.first_output = false -%}
{%- else -%}
{{- '<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>' -}}
{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- if ns.in_tool -%}{{- '<｜tool▁outputs▁end｜>' -}}{%- endif -%}
{%- if add_generation_prompt and not ns.in_tool -%}{{- '<｜Assistant｜><think>\n' -}}{%- endif -%}
"""

# DeepSeek-V4 style: DSML tool calls (tags built from the one token ｜DSML｜), tools in the system prompt.
DEEPSEEK_V4_TEMPLATE = r"""{#- DeepSeek-V4-style (DSML) chat template (test fixture). -#}
{%- set T = '｜DSML｜' -%}
{%- set ns = namespace(system='', last_user=-1) -%}
{%- for m in messages -%}
{%- if m['role'] == 'system' -%}{%- set ns.system = ns.system + ('\n\n' if ns.system else '') + m['content'] -%}{%- endif -%}
{%- if m['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}
{%- endfor -%}
{{- bos_token + ns.system -}}
{%- if tools -%}
{{- ('\n\n' if ns.system else '') + '## Tools\n\nYou can call tools to answer the user. To call them, write one block like this in your reply:\n\n<' + T + 'tool_calls>\n<' + T + 'invoke name="$TOOL_NAME">\n<' + T + 'parameter name="$PARAMETER_NAME" string="true|false">$VALUE</' + T + 'parameter>\n...\n</' + T + 'invoke>\n</' + T + 'tool_calls>\n\nOne invoke per call; several invokes may share the block. Write a string value as it is, with string="true"; write numbers, booleans, arrays and objects as JSON, with string="false".\n\nThe tools, one JSON schema a line:\n<functions>\n' -}}
{%- for tool in tools -%}{{- (tool['function'] if tool['function'] is defined else tool) | tojson -}}{{- '\n' -}}{%- endfor -%}
{{- '</functions>' -}}
{%- endif -%}
{%- for message in messages -%}
{%- set role = message['role'] -%}
{%- if role == 'user' -%}
{{- '<｜User｜>' + message['content'] -}}
{%- elif role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}{{- '<｜User｜><tool_results>' -}}{%- endif -%}
{{- '\n<result>' + message['content'] + '</result>' -}}
{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}{{- '\n</tool_results>' -}}{%- endif -%}
{%- elif role == 'assistant' -%}
{{- '<｜Assistant｜>' -}}
{#- Reasoning is kept only for the turns after the last user message, in thinking mode. -#}
{%- if thinking is defined and thinking is true and loop.index0 > ns.last_user -%}
{{- '<think>' + (message.get('reasoning_content') or '') + '</think>' -}}
{%- else -%}
{{- '</think>' -}}
{%- endif -%}
{%- set content = message.get('content') or '' -%}
{{- content -}}
{%- if message.get('tool_calls') -%}
{{- ('\n\n' if content else '') + '<' + T + 'tool_calls>\n' -}}
{%- for call in message['tool_calls'] -%}
{%- set fn = call.get('function') or call -%}
{%- set args = fn.get('arguments') -%}
{%- if args is string -%}
{{- raise_exception('DSML tool call ' ~ fn.get('name') ~ ': arguments must be an object (a mapping of parameter names to values), not a string; decode the JSON first') -}}
{%- elif args is not mapping -%}
{{- raise_exception('DSML tool call ' ~ fn.get('name') ~ ': arguments must be an object (a mapping of parameter names to values)') -}}
{%- endif -%}
{{- '<' + T + 'invoke name="' + fn['name'] + '">\n' -}}
{%- for key, value in args | items -%}
{%- if value is string -%}
{{- '<' + T + 'parameter name="' + key + '" string="true">' + value + '</' + T + 'parameter>\n' -}}
{%- else -%}
{{- '<' + T + 'parameter name="' + key + '" string="false">' + (value | tojson) + '</' + T + 'parameter>\n' -}}
{%- endif -%}
{%- endfor -%}
{{- '</' + T + 'invoke>\n' -}}
{%- endfor -%}
{{- '</' + T + 'tool_calls>' -}}
{%- endif -%}
{{- '<｜end▁of▁sentence｜>' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<｜Assistant｜>' -}}{%- if thinking is defined and thinking is true -%}{{- '<think>' -}}{%- else -%}{{- '</think>' -}}{%- endif -%}
{%- endif -%}
"""

# --------------------------------------------------------------------------------------------------
# gpt-oss (harmony)

GPT_OSS_TEMPLATE = r"""{#- gpt-oss (harmony) style chat template (test fixture). -#}
{%- macro ts_type(spec) -%}
{%- if spec['enum'] is defined -%}{{- spec['enum'] | map('tojson') | join(' | ') -}}
{%- elif spec['type'] == 'string' -%}{{- 'string' -}}
{%- elif spec['type'] in ['number', 'integer'] -%}{{- 'number' -}}
{%- elif spec['type'] == 'boolean' -%}{{- 'boolean' -}}
{%- elif spec['type'] == 'array' -%}{{- (ts_type(spec['items']) if spec['items'] is defined else 'any') + '[]' -}}
{%- elif spec['type'] == 'object' -%}{{- 'object' -}}
{%- else -%}{{- 'any' -}}{%- endif -%}
{%- endmacro -%}
{%- set identity = model_identity if model_identity is defined else 'You are ChatGPT, a large language model trained by OpenAI.' -%}
{%- set effort = reasoning_effort if reasoning_effort is defined else 'medium' -%}
{{- '<|start|>system<|message|>' + identity + '\nKnowledge cutoff: 2024-06\nCurrent date: ' + strftime_now('%Y-%m-%d') + '\n\nReasoning: ' + effort + '\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.' -}}
{%- if tools -%}{{- "\nCalls to these tools must go to the commentary channel: 'functions'." -}}{%- endif -%}
{{- '<|end|>' -}}
{%- set loop_messages = messages -%}
{%- set developer = '' -%}
{%- if messages and messages[0]['role'] in ['system', 'developer'] -%}
{%- set developer = messages[0]['content'] -%}{%- set loop_messages = messages[1:] -%}
{%- endif -%}
{%- if developer or tools -%}
{{- '<|start|>developer<|message|>' -}}
{%- if developer -%}{{- '# Instructions\n\n' + developer + '\n\n' -}}{%- endif -%}
{%- if tools -%}
{{- '# Tools\n\n## functions\n\nnamespace functions {\n\n' -}}
{%- for tool in tools -%}
{%- set fn = tool['function'] if tool['function'] is defined else tool -%}
{%- if fn['description'] is defined -%}{{- '// ' + fn['description'] + '\n' -}}{%- endif -%}
{{- 'type ' + fn['name'] + ' = ' -}}
{%- set params = fn['parameters'] if fn['parameters'] is defined else {} -%}
{%- if params['properties'] is defined and params['properties'] -%}
{{- '(_: {\n' -}}
{%- for pname, pspec in params['properties'] | items -%}
{%- if pspec['description'] is defined -%}{{- '// ' + pspec['description'] + '\n' -}}{%- endif -%}
{{- pname + ('' if pname in (params['required'] or []) else '?') + ': ' + ts_type(pspec) + ',\n' -}}
{%- endfor -%}
{{- '}) => any;\n\n' -}}
{%- else -%}
{{- '() => any;\n\n' -}}
{%- endif -%}
{%- endfor -%}
{{- '} // namespace functions' -}}
{%- endif -%}
{{- '<|end|>' -}}
{%- endif -%}
{%- set last_call = namespace(name=none) -%}
{%- for message in loop_messages -%}
{%- if message['role'] == 'user' -%}
{{- '<|start|>user<|message|>' + message['content'] + '<|end|>' -}}
{%- elif message['role'] == 'assistant' and 'tool_calls' in message -%}
{#- Reasoning (`thinking`) of a call turn is kept until a final answer follows it; one call per message. -#}
{%- set later = namespace(final=false) -%}
{%- for m in loop_messages[loop.index:] -%}
{%- if m['role'] == 'assistant' and 'tool_calls' not in m -%}{%- set later.final = true -%}{%- endif -%}
{%- endfor -%}
{%- if message.get('content') and message.get('thinking') -%}
{{- raise_exception('Cannot pass both content and thinking in an assistant message with tool calls! Put the analysis in one or the other.') -}}
{%- elif message.get('content') and not later.final -%}
{{- '<|start|>assistant<|channel|>analysis<|message|>' + message['content'] + '<|end|>' -}}
{%- elif message.get('thinking') and not later.final -%}
{{- '<|start|>assistant<|channel|>analysis<|message|>' + message['thinking'] + '<|end|>' -}}
{%- endif -%}
{%- set call = message['tool_calls'][0] -%}
{%- set call = call['function'] if call['function'] is defined else call -%}
{{- '<|start|>assistant to=functions.' + call['name'] + '<|channel|>commentary json<|message|>' + (call['arguments'] | tojson) + '<|call|>' -}}
{%- set last_call.name = call['name'] -%}
{%- elif message['role'] == 'assistant' -%}
{%- if loop.last and not add_generation_prompt -%}
{%- if message.get('thinking') -%}{{- '<|start|>assistant<|channel|>analysis<|message|>' + message['thinking'] + '<|end|>' -}}{%- endif -%}
{{- '<|start|>assistant<|channel|>final<|message|>' + message['content'] + '<|return|>' -}}
{%- else -%}
{{- '<|start|>assistant<|channel|>final<|message|>' + message['content'] + '<|end|>' -}}
{%- endif -%}
{%- set last_call.name = none -%}
{%- elif message['role'] == 'tool' -%}
{%- if last_call.name is none -%}
{{- raise_exception('Message has tool role, but there was no previous assistant message with a tool call!') -}}
{%- endif -%}
{{- '<|start|>functions.' + last_call.name + ' to=assistant<|channel|>commentary<|message|>' + (message['content'] | tojson) + '<|end|>' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%}
"""
