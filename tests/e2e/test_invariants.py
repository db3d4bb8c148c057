"""The logprob invariant, end to end: for every choice, the bytes of its logprob
entries, joined, equal the returned text (chat: the `bytes` arrays; completions: the
`tokens` strings, where "bytes:\\xNN" spells bytes that are not UTF-8). It must hold
for chat and completions, streamed (chunk by chunk) and not, with stop strings, with
n > 1, with echo, and with multi-byte characters in prompts and outputs.

Models: stories260K (emoji and CJK are byte tokens there: forcing those tokens in order
with allowed_token_ids, logit_bias and a strong repetition penalty makes outputs that
split characters across tokens) and llama-2-tiny-random (random weights over the full
Llama-2 vocabulary: its samples hold Cyrillic, CJK and accented words).

Text that is not valid UTF-8 (a model may sample any byte token) is written with one
U+FFFD per maximal invalid subpart, as Python's decode(errors="replace") does; the
bytes stay exact. Everywhere else the equality is exact.
"""
import unittest

import loomtest
from loomtest import Gateway, chat_choices, shared, spells, token_bytes

STORIES = shared("models/stories260K.gguf")
LLAMA = shared("models/llama-2-tiny-random.gguf")
CHAT = "/v1/chat/completions"
COMP = "/v1/completions"


def forced(text, top=90, step=10):
    """Request fields that make the model write `text` byte token by byte token:
    only its byte tokens are allowed, biased in decreasing order, and once used a token
    is pushed down by the repetition penalty (the prompt must not hold those bytes)."""
    seq = [3 + b for b in text.encode()]
    assert len(set(seq)) == len(seq), "each byte once"
    return {"allowed_token_ids": seq, "logit_bias": {str(t): top - step * k for k, t in enumerate(seq)},
            "repetition_penalty": 100, "temperature": 0, "max_tokens": len(seq)}


class Invariants(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stories = Gateway(STORIES)
        cls.llama = Gateway(LLAMA)
        cls.stories.wait_ready()
        cls.llama.wait_ready()

    @classmethod
    def tearDownClass(cls):
        cls.stories.stop()
        cls.llama.stop()

    # -- the check ---------------------------------------------------------------------

    def run_both(self, gw, path, body):
        """Sends `body` streamed and not; checks the invariant on every choice and on
        every chunk; for reproducible requests, checks that both give the same choices.
        Returns the non-streamed choices as {index: (text, entry_bytes_list, finish)}."""
        status, out = gw.post(path, body)
        self.assertEqual(status, 200, out)
        plain = {}
        for ch in out["choices"]:
            if path == CHAT:
                text = ch["message"]["content"]
                entries = [bytes(e["bytes"]) if e["bytes"] is not None else b""
                           for e in ch["logprobs"]["content"]]
                # Chat `token` strings: the text when valid UTF-8, else bytes:\xNN.
                for e in ch["logprobs"]["content"]:
                    if e["bytes"] is not None:
                        self.assertEqual(token_bytes(e["token"]), bytes(e["bytes"]), e)
            else:
                text = ch["text"]
                entries = [token_bytes(t) for t in ch["logprobs"]["tokens"]]
            self.assertTrue(spells(text, b"".join(entries)), (text, entries))
            plain[ch["index"]] = (text, entries, ch["finish_reason"])
        self.assertEqual(sorted(plain), list(range(len(plain))))
        if "stop" not in body:  # every generated token has its entry
            n_entries = sum(len(e) for _, e, _ in plain.values())
            if not body.get("echo"):
                self.assertEqual(n_entries, out["usage"]["completion_tokens"])

        status, chunks, done = gw.stream(path, dict(body, stream=True))
        self.assertEqual(status, 200, chunks)
        self.assertTrue(done)
        streamed = {}
        if path == CHAT:
            for idx, (text, entries, finish) in chat_choices(chunks).items():
                streamed[idx] = (text, [bytes(e["bytes"] or []) for e in entries], finish)
        else:
            for c in chunks:
                for ch in c["choices"]:
                    part = [token_bytes(t) for t in (ch["logprobs"] or {}).get("tokens", [])]
                    self.assertTrue(spells(ch["text"], b"".join(part)), ch)  # chunk by chunk
                    text, entries, finish = streamed.get(ch["index"], ("", [], None))
                    streamed[ch["index"]] = (text + ch["text"], entries + part, ch["finish_reason"] or finish)
        for idx, (text, entries, finish) in streamed.items():
            self.assertTrue(spells(text, b"".join(entries)), (text, entries))
        if body.get("temperature") == 0 or "seed" in body:
            self.assertEqual(streamed, plain)
        return plain

    def run_all(self, gw, body, prompt):
        """run_both on chat and completions (with logprobs); returns both results."""
        chat = self.run_both(gw, CHAT, dict(body, messages=[{"role": "user", "content": prompt}], logprobs=True,
                                            top_logprobs=2))
        comp = self.run_both(gw, COMP, dict(body, prompt=prompt, logprobs=2))
        return chat, comp

    def model(self, gw):
        return "stories260K" if gw is self.stories else "llama-2-tiny-random"

    # -- cases -------------------------------------------------------------------------

    def test_sampled_text(self):
        for gw in (self.stories, self.llama):
            for seed in (1, 2):
                with self.subTest(model=self.model(gw), seed=seed):
                    self.run_all(gw, {"model": self.model(gw), "temperature": 1.0, "seed": seed, "max_tokens": 48},
                                 "Once upon a time")

    def test_stop_strings(self):
        chat, comp = self.run_all(self.stories, {"model": "stories260K", "temperature": 0, "max_tokens": 48,
                                                 "stop": [" park", "."]}, "Once upon a time")
        self.assertEqual(chat[0][0], ", there was a little girl named Lily")
        self.assertEqual(comp[0][2], "stop")
        # A stop string split across several tokens, with n > 1.
        chat, comp = self.run_all(self.stories, {"model": "stories260K", "temperature": 1.0, "seed": 3, "n": 3,
                                                 "max_tokens": 40, "stop": ["ed a", "ay."]}, "Lily and Tom")
        self.assertEqual(len(chat), 3)

    def test_n_choices(self):
        for gw in (self.stories, self.llama):
            with self.subTest(model=self.model(gw)):
                chat, comp = self.run_all(gw, {"model": self.model(gw), "temperature": 1.0, "seed": 8, "n": 3,
                                               "max_tokens": 24}, "The little dog")
                self.assertEqual(len(chat), 3)
                self.assertEqual(len(comp), 3)

    def test_multibyte_prompts(self):
        for gw in (self.stories, self.llama):
            for prompt in ("The cat saw 😀 and 中文 🎉", "Привет, 世界! Ünïcödé ✓"):
                with self.subTest(model=self.model(gw), prompt=prompt):
                    self.run_all(gw, {"model": self.model(gw), "temperature": 1.0, "seed": 4, "max_tokens": 32},
                                 prompt)

    def test_multibyte_outputs_of_the_full_llama_vocabulary(self):
        multibyte = 0
        for seed in range(4):
            chat, comp = self.run_all(self.llama, {"model": "llama-2-tiny-random", "temperature": 1.0,
                                                   "seed": seed, "max_tokens": 60}, "Привет, 世界! 😀")
            multibyte += sum(1 for b in chat[0][1] if any(x >= 0x80 for x in b))
        self.assertGreater(multibyte, 20)  # Cyrillic, CJK, accents: many multi-byte tokens
        # A multi-byte stop string: the first multi-byte token after the start of a
        # sample, as stop string, cuts the same sample just before it.
        body = {"model": "llama-2-tiny-random", "temperature": 1.0, "seed": 0, "max_tokens": 60}
        text, entries, _ = self.run_both(self.llama, COMP, dict(body, prompt="Привет, 世界! 😀", logprobs=0))[0]
        words = [b.decode("utf-8", errors="replace").strip() for b in entries]
        stop = next(w for i, w in enumerate(words)
                    if i > 0 and w and "\ufffd" not in w and any(ord(c) >= 0x80 for c in w))
        want = text[:text.index(stop)]
        chat, comp = self.run_all(self.llama, dict(body, stop=[stop]), "Привет, 世界! 😀")
        self.assertEqual((comp[0][0], comp[0][2]), (want, "stop"))
        self.assertEqual((chat[0][0], chat[0][2]), (want, "stop"))

    def test_characters_split_across_byte_tokens(self):
        for gw in (self.stories, self.llama):
            with self.subTest(model=self.model(gw)):
                body = dict(forced("😀中"), model=self.model(gw))
                chat, comp = self.run_all(gw, dict(body), "Hello")
                self.assertEqual(chat[0][0], "😀中")
                self.assertEqual(comp[0][0], "😀中")
                self.assertEqual(chat[0][1], [bytes([b]) for b in "😀中".encode()])
                # In a stream, each character arrives whole, in one chunk with its entries.
                _, chunks, _ = gw.stream(CHAT, dict(body, messages=[{"role": "user", "content": "Hello"}],
                                                    logprobs=True, stream=True))
                deltas = [(c["choices"][0]["delta"].get("content"), len(c["choices"][0]["logprobs"]["content"]))
                          for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
                self.assertEqual(deltas, [("😀", 4), ("中", 3)])

    def test_stop_strings_on_split_characters(self):
        body = dict(forced("😀中"), model="stories260K")
        chat, comp = self.run_all(self.stories, dict(body, stop=["中"]), "Hello")
        self.assertEqual((chat[0][0], chat[0][2]), ("😀", "stop"))
        self.assertEqual(len(chat[0][1]), 4)
        chat, comp = self.run_all(self.stories, dict(body, stop=["😀"]), "Hello")
        self.assertEqual((chat[0][0], chat[0][1], chat[0][2]), ("", [], "stop"))
        self.assertEqual((comp[0][0], comp[0][1], comp[0][2]), ("", [], "stop"))

    def test_invalid_bytes_are_replaced_in_text_only(self):
        # The forcing trick breaks when the prompt holds those bytes ("Привет" has 9F and
        # 80), so the model writes byte tokens that are not valid UTF-8.
        body = dict(forced("😀中"), model="stories260K")
        chat, comp = self.run_all(self.stories, dict(body), "Привет")
        self.assertIn("\ufffd", comp[0][0])
        self.assertEqual(len(comp[0][1]), 7)
        self.assertTrue(all(len(b) == 1 for b in comp[0][1]))

    def test_echo(self):
        for gw in (self.stories, self.llama):
            with self.subTest(model=self.model(gw)):
                prompt = "Hi 😀 中文, Привет"
                comp = self.run_both(gw, COMP, {"model": self.model(gw), "prompt": prompt, "echo": True,
                                                "logprobs": 1, "max_tokens": 6, "temperature": 0})
                self.assertTrue(comp[0][0].startswith("Hi 😀 中文, Привет"), comp[0][0])
                comp = self.run_both(gw, COMP, {"model": self.model(gw), "prompt": [prompt, "x"], "n": 2,
                                                "echo": True, "logprobs": 0, "max_tokens": 0})
                self.assertEqual(comp[0][0], prompt)
                self.assertEqual(comp[3][0], "x")
        # Echo, then a character split across byte tokens.
        comp = self.run_both(self.stories, COMP, dict(forced("😀中"), model="stories260K", prompt="Hello",
                                                     echo=True, logprobs=3))
        self.assertEqual(comp[0][0], "Hello😀中")


if __name__ == "__main__":
    loomtest.main()
