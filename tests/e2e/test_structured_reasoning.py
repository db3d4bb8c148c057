#!/usr/bin/env python3
"""Structured output after reasoning, end to end (issue 40, item 1).

loom-gateway and the CPU engine on a copy of stories260K with DeepSeek R1's chat template,
whose token "." is renamed `</think>` (a user-defined token, as in DeepSeek's vocabulary):
the story model then closes its "reasoning" where it would end its first sentence. With
thinking on the prompt ends inside `<think>`; `response_format` json_schema and json_object,
`guided_choice` and forced tool calls must leave the reasoning free and apply the grammar
from `</think>` on: reasoning_content is the story's first sentence, content (or the call's
arguments) the constrained text, each logprob list spelling exactly its part, streamed and
not. With thinking off (the prompt closes the block) the grammar applies from the first
token and there is no reasoning.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_edit  # noqa: E402
from loomtest import Gateway, ModelCopyTestCase, joined_bytes, main, shared  # noqa: E402
from test_structured_output import SCHEMAS, TOOLS, TZ, validate  # noqa: E402

MESSAGES = [{"role": "user", "content": "Tell me about a cat"}]
THINK = {"enable_thinking": True}


class DeepSeekR1Reasoning(ModelCopyTestCase):
    source_model = shared("models/stories260K.gguf")
    template = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"

    @classmethod
    def setUpClass(cls):
        path, _ = cls.copy_model(replace_tokens={".": ("</think>", gguf_edit.USER_DEFINED)},
                                 set_kv={"tokenizer.ggml.add_space_prefix": (gguf_edit.BOOL, False),
                                         "llama.context_length": (gguf_edit.U32, 8192)})
        cls.gw = Gateway(path)
        cls.gw.wait_ready()

    def ask(self, **extra):
        body = {"model": self.model_id, "messages": MESSAGES, "max_tokens": 300, "logprobs": True,
                "return_token_ids": True, "chat_template_kwargs": THINK}
        body.update(extra)
        return self.completion(body)

    def fold(self, chunks):
        """A stream folded: (content, reasoning, calls, finish, token ids); every chunk's
        logprob lists spell its deltas."""
        content, reasoning, calls, finish, ids = "", "", {}, None, []
        for ch in chunks:
            for c in ch.get("choices", []):
                d, lp = c["delta"], c.get("logprobs") or {}
                self.assertEqual(joined_bytes(lp.get("content") or []), (d.get("content") or "").encode())
                self.assertEqual(joined_bytes(lp.get("reasoning_content") or []),
                                 (d.get("reasoning_content") or "").encode())
                content += d.get("content") or ""
                reasoning += d.get("reasoning_content") or ""
                for t in d.get("tool_calls") or []:
                    cur = calls.setdefault(t["index"], {"name": "", "arguments": ""})
                    cur["name"] += t.get("function", {}).get("name") or ""
                    cur["arguments"] += t.get("function", {}).get("arguments") or ""
                finish = c["finish_reason"] or finish
                ids += c.get("token_ids") or []
        return content, reasoning, [calls[k] for k in sorted(calls)], finish, ids

    def check_split(self, c):
        """The whole choice: the generated ids spell the reasoning, `</think>`, at most two
        whitespace bytes, then the constrained text; each logprob list spells its part.
        Returns the message and that text."""
        m, lp = c["message"], c["logprobs"]
        self.assertEqual(joined_bytes(lp["content"]), (m["content"] or "").encode())
        self.assertEqual(joined_bytes(lp.get("reasoning_content", [])), m.get("reasoning_content", "").encode())
        status, body = self.gw.post("/detokenize", {"model": self.model_id, "tokens": c["token_ids"]})
        self.assertEqual(status, 200, body)
        raw = body["prompt"]
        close = raw.find("</think>")
        self.assertGreater(close, 0, raw)
        self.assertEqual(raw[:close].strip(), m["reasoning_content"])
        tail = raw[close + len("</think>"):]
        self.assertLessEqual(len(tail) - len(tail.lstrip()), 2, raw)
        return m, tail.lstrip()

    def test_json_schema_json_object_and_choice_after_reasoning(self):
        schema = SCHEMAS[4]
        cases = [({"response_format": {"type": "json_schema", "json_schema": {"name": "pet", "schema": schema}}},
                  lambda s: validate(json.loads(s), schema, schema)),
                 ({"response_format": {"type": "json_object"}}, lambda s: self.assertIsInstance(json.loads(s), dict)),
                 ({"guided_choice": ["cat", "dog", "a big red fox"]},
                  lambda s: self.assertIn(s, ["cat", "dog", "a big red fox"]))]
        for extra, check in cases:
            for seed in range(3):
                where = "%s seed %d" % (list(extra)[0], seed)
                c = self.ask(seed=seed, **extra)
                m, constrained = self.check_split(c)
                self.assertEqual(constrained, m["content"])
                self.assertEqual(c["finish_reason"], "stop", where)
                self.assertGreater(len(m["reasoning_content"]), 3, where)  # free text: the story's words
                self.assertNotIn("</think>", m["reasoning_content"])
                check(m["content"])
                content, reasoning, _, finish, _ = self.fold(self.ask(seed=seed, stream=True, **extra))
                self.assertEqual((content, reasoning, finish), (m["content"], m["reasoning_content"], "stop"), where)

    def test_forced_calls_after_reasoning(self):
        for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
            c = self.ask(seed=1, tools=TOOLS, tool_choice=choice, parallel_tool_calls=False)
            m, constrained = self.check_split(c)
            self.assertTrue(constrained.startswith("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"), constrained)
            self.assertEqual(c["finish_reason"], "tool_calls", c)
            self.assertGreater(len(m["reasoning_content"]), 3)
            self.assertIsNone(m["content"])
            self.assertEqual(len(m["tool_calls"]), 1)
            fn = m["tool_calls"][0]["function"]
            if choice != "required":
                self.assertEqual(fn["name"], "get_time")
            schema = TZ if fn["name"] == "get_time" else TOOLS[0]["function"]["parameters"]
            validate(json.loads(fn["arguments"]), schema, schema)
            self.assertEqual(joined_bytes(c["logprobs"]["tool_calls"][0]["arguments"]), fn["arguments"].encode())
            _, reasoning, calls, finish, _ = self.fold(
                self.ask(seed=1, tools=TOOLS, tool_choice=choice, parallel_tool_calls=False, stream=True))
            self.assertEqual((reasoning, finish), (m["reasoning_content"], "tool_calls"))
            self.assertEqual(calls, [{"name": fn["name"], "arguments": fn["arguments"]}])

    def test_thinking_off_constrains_from_the_first_token(self):
        fmt = {"type": "json_schema", "json_schema": {"name": "pet", "schema": SCHEMAS[4]}}
        c = self.ask(seed=2, response_format=fmt, chat_template_kwargs={})
        self.assertEqual(c["finish_reason"], "stop")
        self.assertNotIn("reasoning_content", c["message"])
        validate(json.loads(c["message"]["content"]), SCHEMAS[4], SCHEMAS[4])
        status, body = self.gw.post("/detokenize", {"model": self.model_id, "tokens": c["token_ids"]})
        self.assertEqual(body["prompt"], c["message"]["content"])

    def test_reasoning_cut_by_max_tokens_leaves_content_null(self):
        # Issue 40, item 7: the whole output is reasoning; the grammar never started.
        c = self.ask(seed=0, max_tokens=3, response_format={"type": "json_object"})
        self.assertEqual(c["finish_reason"], "length")
        self.assertIsNone(c["message"]["content"])
        self.assertTrue(c["message"]["reasoning_content"])
        self.assertEqual(c["logprobs"]["content"], [])


if __name__ == "__main__":
    main()
