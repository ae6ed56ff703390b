"""Seeded synthetic conversations for the test fixtures (tokenizers and the tiny model).

Used only by ``make_fixture_tokenizers.py`` and ``train_tiny_model.py``; nothing in the library imports
it. Everything is drawn from a ``random.Random`` passed in by the caller, so the same seed gives the
same conversations on every machine and Python version (>= 3.10).

An ``Example`` is one assistant turn to be generated: the conversation *before* it (``messages``,
OpenAI-style dicts, as the pipeline would hand them to ``apply_chat_template``), the ``tools`` that
were declared, and the turn the target model should produce, split into ``reasoning``, ``response``
and ``tool_calls``. The shapes follow the demo's configs: glaive function calling (a system prompt,
sometimes tools, a user question, sometimes an earlier call and its result), general chat and math.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any, Callable

# --------------------------------------------------------------------------------------------------
# value pools

CITIES = [
    "Paris", "London", "Tokyo", "New York", "Berlin", "Madrid", "Rome", "Sydney", "Toronto", "Cairo",
    "Mumbai", "Seoul", "Lisbon", "Dublin", "Chicago", "Boston", "Vienna", "Oslo", "Lima", "Denver",
]
CURRENCIES = ["USD", "EUR", "GBP", "JPY", "CAD", "AUD", "CHF", "INR"]
NAMES = ["Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry", "Iris", "John", "Kate", "Liam"]
INGREDIENTS = ["chicken", "rice", "tomatoes", "garlic", "pasta", "beef", "broccoli", "cheese", "eggs",
               "mushrooms", "onions", "potatoes", "spinach", "salmon", "beans", "lemon"]
STOCKS = ["AAPL", "MSFT", "GOOGL", "AMZN", "TSLA", "NVDA", "META", "IBM"]
LANGUAGES = ["French", "Spanish", "German", "Italian", "Japanese", "Portuguese", "Dutch", "Korean"]
NEWS = ["technology", "sports", "business", "science", "health", "politics", "entertainment"]
TOPICS = ["machine learning", "climate change", "the history of Rome", "healthy sleep", "time management",
          "photosynthesis", "black holes", "the stock market", "learning a new language", "ocean tides"]
GENRES = ["comedy", "drama", "action", "thriller", "science fiction", "romance", "horror"]
MOVIES = ["Inception", "The Matrix", "Titanic", "Avatar", "Jaws", "Casablanca", "Up", "Heat"]
BOOKS = ["mystery", "history", "fantasy", "biography", "cooking", "travel", "poetry"]
SENTENCES = [
    "Je suis un étudiant", "Ich liebe Musik", "Buenos días a todos", "Il fait beau aujourd'hui",
    "Dove si trova la stazione?", "Hello, how are you?", "Obrigado pela ajuda",
]
WORDS = ["cat", "river", "window", "garden", "music", "planet", "bridge", "coffee", "letter", "mountain"]


def _money(rng: random.Random, lo: int, hi: int) -> int:
    return rng.randrange(lo, hi, 5 if hi - lo > 50 else 1)


# --------------------------------------------------------------------------------------------------
# tools: JSON schema + a scenario generator


@dataclass
class Scenario:
    """One use of a tool: what the user asks, the call, what it returns, the final answer."""

    question: str
    arguments: dict[str, Any]
    result: dict[str, Any]
    answer: str
    goal: str  # "the weather in Paris", used in reasoning


@dataclass
class Tool:
    name: str
    description: str
    properties: dict[str, dict[str, Any]]
    required: list[str]
    scenario: Callable[[random.Random], Scenario]

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {"type": "object", "properties": self.properties, "required": self.required},
            },
        }


def _weather(rng: random.Random) -> Scenario:
    city = rng.choice(CITIES)
    unit = rng.choice(["celsius", "fahrenheit"])
    t = rng.randint(-5, 35) if unit == "celsius" else rng.randint(25, 95)
    cond = rng.choice(["sunny", "cloudy", "rainy", "windy", "snowy"])
    q = rng.choice([
        f"What's the weather like in {city} right now?",
        f"Can you tell me the current weather in {city} in {unit}?",
        f"Is it cold in {city} today?",
        f"How warm is it in {city}?",
    ])
    return Scenario(q, {"location": city, "unit": unit}, {"temperature": t, "unit": unit, "condition": cond},
                    f"It is currently {t} degrees {unit} and {cond} in {city}.", f"the weather in {city}")


def _bmi(rng: random.Random) -> Scenario:
    w = rng.randint(50, 110)
    h = rng.choice([1.55, 1.6, 1.65, 1.7, 1.75, 1.8, 1.85, 1.9])
    bmi = round(w / (h * h), 2)
    q = rng.choice([f"I weigh {w} kg and I am {h} m tall. What is my BMI?",
                    f"Calculate my BMI please: weight {w} kg, height {h} meters."])
    return Scenario(q, {"weight": w, "height": h}, {"bmi": bmi},
                    f"Your Body Mass Index (BMI) is {bmi}.", "a BMI calculation")


def _currency(rng: random.Random) -> Scenario:
    a, b = rng.sample(CURRENCIES, 2)
    amount = _money(rng, 10, 2000)
    rate = round(rng.uniform(0.5, 1.6), 2)
    conv = round(amount * rate, 2)
    q = rng.choice([f"How much is {amount} {a} in {b}?",
                    f"I need to convert {amount} {a} to {b}.",
                    f"Can you convert {amount} {a} into {b} for me?"])
    return Scenario(q, {"amount": amount, "from_currency": a, "to_currency": b},
                    {"converted_amount": conv, "from_currency": a, "to_currency": b},
                    f"{amount} {a} is approximately {conv} {b}.", f"to convert {amount} {a} to {b}")


def _recipes(rng: random.Random) -> Scenario:
    ing = rng.sample(INGREDIENTS, rng.randint(1, 3))
    dish = f"{ing[0].capitalize()} {rng.choice(['Stir Fry', 'Soup', 'Salad', 'Bake', 'Curry'])}"
    q = rng.choice([f"I have {', '.join(ing)}. What can I cook?",
                    f"Find me a recipe with {' and '.join(ing)}."])
    return Scenario(q, {"ingredients": ing}, {"recipes": [{"name": dish, "time_minutes": rng.choice([15, 20, 30, 45])}]},
                    f"You could make {dish}. It uses {', '.join(ing)}.", f"a recipe with {', '.join(ing)}")


def _stock(rng: random.Random) -> Scenario:
    s = rng.choice(STOCKS)
    p = round(rng.uniform(50, 900), 2)
    q = rng.choice([f"What is the current stock price of {s}?", f"How much is {s} trading at?"])
    return Scenario(q, {"symbol": s}, {"symbol": s, "price": p},
                    f"The current stock price of {s} is ${p}.", f"the stock price of {s}")


def _loan(rng: random.Random) -> Scenario:
    principal = _money(rng, 5000, 300000)
    rate = rng.choice([3.5, 4, 4.5, 5, 5.5, 6, 7])
    years = rng.choice([5, 10, 15, 20, 30])
    pay = round(principal * (rate / 1200) / (1 - (1 + rate / 1200) ** (-12 * years)), 2)
    q = (f"I want a loan of ${principal} at {rate}% annual interest for {years} years. "
         f"What would my monthly payment be?")
    return Scenario(q, {"principal": principal, "interest_rate": rate, "loan_term": years},
                    {"monthly_payment": pay}, f"Your monthly payment would be about ${pay}.",
                    "a monthly loan payment")


def _translate(rng: random.Random) -> Scenario:
    text = rng.choice(["Good morning", "Where is the library?", "Thank you very much", "I love this city"])
    lang = rng.choice(LANGUAGES)
    out = f"[{lang}] {text}"
    q = rng.choice([f"Translate \"{text}\" into {lang}.", f"How do you say '{text}' in {lang}?"])
    return Scenario(q, {"text": text, "target_language": lang}, {"translated_text": out},
                    f"In {lang}, \"{text}\" is: {out}.", f"a translation into {lang}")


def _email(rng: random.Random) -> Scenario:
    name = rng.choice(NAMES)
    addr = f"{name.lower()}@example.com"
    subj = rng.choice(["Meeting tomorrow", "Project update", "Lunch on Friday", "Invoice"])
    body = rng.choice(["See you at 10am.", "The report is ready.", "Are you free at noon?", "Please find it attached."])
    q = f"Send an email to {addr} with the subject '{subj}' saying: {body}"
    return Scenario(q, {"recipient": addr, "subject": subj, "body": body}, {"status": "sent"},
                    f"The email to {addr} has been sent.", f"to email {name}")


def _password(rng: random.Random) -> Scenario:
    n = rng.choice([8, 10, 12, 16, 20])
    pw = "".join(rng.choice("abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789!#$%") for _ in range(n))
    q = rng.choice([f"I need a new password. Can you generate one with {n} characters?",
                    f"Generate a random password of length {n}."])
    return Scenario(q, {"length": n}, {"password": pw}, f"Here is your new password: {pw}",
                    f"a {n} character password")


def _news(rng: random.Random) -> Scenario:
    c = rng.choice(NEWS)
    head = f"New developments in {c} this week"
    q = rng.choice([f"What are the latest {c} news headlines?", f"Show me today's {c} news."])
    return Scenario(q, {"category": c}, {"headlines": [head]},
                    f"The top {c} headline is: \"{head}\".", f"the latest {c} news")


def _tip(rng: random.Random) -> Scenario:
    bill = _money(rng, 20, 250)
    pct = rng.choice([10, 15, 18, 20, 25])
    tip = round(bill * pct / 100, 2)
    q = f"My bill is ${bill} and I want to leave a {pct}% tip. How much should I tip?"
    return Scenario(q, {"bill_amount": bill, "tip_percentage": pct}, {"tip_amount": tip},
                    f"You should leave a tip of ${tip}.", "a tip calculation")


def _distance(rng: random.Random) -> Scenario:
    a, b = rng.sample(CITIES, 2)
    d = rng.randint(50, 9000)
    q = rng.choice([f"How far is {a} from {b}?", f"What is the distance between {a} and {b}?"])
    return Scenario(q, {"origin": a, "destination": b}, {"distance": d, "unit": "km"},
                    f"The distance between {a} and {b} is about {d} km.", f"the distance from {a} to {b}")


def _language(rng: random.Random) -> Scenario:
    s = rng.choice(SENTENCES)
    q = f"Which language is this: \"{s}\"?"
    lang = {"Je": "French", "Ich": "German", "Buenos": "Spanish", "Il": "French", "Dove": "Italian",
            "Hello,": "English", "Obrigado": "Portuguese"}[s.split()[0]]
    return Scenario(q, {"text": s}, {"language": lang}, f"The text is in {lang}.", "the language of a text")


def _movie(rng: random.Random) -> Scenario:
    m = rng.choice(MOVIES)
    year = rng.randint(1942, 2015)
    g = rng.choice(GENRES)
    q = rng.choice([f"Can you tell me about the movie {m}?", f"What year was {m} released?"])
    return Scenario(q, {"title": m}, {"title": m, "year": year, "genre": g, "rating": round(rng.uniform(6, 9), 1)},
                    f"{m} is a {g} film released in {year}.", f"details of the movie {m}")


def _books(rng: random.Random) -> Scenario:
    g = rng.choice(BOOKS)
    title = f"The {rng.choice(WORDS).capitalize()} {rng.choice(['Secret', 'Journey', 'Story', 'Guide'])}"
    q = rng.choice([f"Can you find me a good {g} book?", f"Search for {g} books."])
    return Scenario(q, {"query": g}, {"results": [{"title": title, "author": rng.choice(NAMES) + " Smith"}]},
                    f"I found \"{title}\", a {g} book you might enjoy.", f"{g} books")


def _todo(rng: random.Random) -> Scenario:
    task = rng.choice(["buy groceries", "call the bank", "finish the report", "book a dentist appointment"])
    day = f"2024-0{rng.randint(1, 9)}-{rng.randint(10, 28)}"
    q = f"Add a todo item to {task} by {day}."
    return Scenario(q, {"title": task, "due_date": day}, {"status": "created", "id": rng.randint(100, 999)},
                    f"I added \"{task}\" to your todo list, due {day}.", "a new todo item")


def _str(desc: str) -> dict[str, Any]:
    return {"type": "string", "description": desc}


def _num(desc: str) -> dict[str, Any]:
    return {"type": "number", "description": desc}


TOOLS: list[Tool] = [
    Tool("get_current_weather", "Get the current weather for a location",
         {"location": _str("The city name"), "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
         ["location"], _weather),
    Tool("calculate_bmi", "Calculate the Body Mass Index (BMI)",
         {"weight": _num("The weight in kilograms"), "height": _num("The height in meters")},
         ["weight", "height"], _bmi),
    Tool("convert_currency", "Convert an amount from one currency to another",
         {"amount": _num("The amount to convert"), "from_currency": _str("The currency to convert from"),
          "to_currency": _str("The currency to convert to")},
         ["amount", "from_currency", "to_currency"], _currency),
    Tool("search_recipes", "Search for recipes based on ingredients",
         {"ingredients": {"type": "array", "items": {"type": "string"}, "description": "The ingredients to use"}},
         ["ingredients"], _recipes),
    Tool("get_stock_price", "Get the current stock price of a company",
         {"symbol": _str("The stock symbol, e.g. AAPL")}, ["symbol"], _stock),
    Tool("calculate_loan_payment", "Calculate the monthly loan payment",
         {"principal": _num("The loan amount"), "interest_rate": _num("The annual interest rate"),
          "loan_term": {"type": "integer", "description": "The loan term in years"}},
         ["principal", "interest_rate", "loan_term"], _loan),
    Tool("translate_text", "Translate text to a target language",
         {"text": _str("The text to translate"), "target_language": _str("The language to translate to")},
         ["text", "target_language"], _translate),
    Tool("send_email", "Send an email to a recipient",
         {"recipient": _str("The email address"), "subject": _str("The subject"), "body": _str("The message")},
         ["recipient", "subject", "body"], _email),
    Tool("generate_password", "Generate a random password",
         {"length": {"type": "integer", "description": "The length of the password"}}, ["length"], _password),
    Tool("get_news_headlines", "Get the latest news headlines",
         {"category": _str("The news category")}, ["category"], _news),
    Tool("calculate_tip", "Calculate the tip amount for a bill",
         {"bill_amount": _num("The total bill"), "tip_percentage": _num("The tip percentage")},
         ["bill_amount", "tip_percentage"], _tip),
    Tool("calculate_distance", "Calculate the distance between two locations",
         {"origin": _str("The starting location"), "destination": _str("The destination")},
         ["origin", "destination"], _distance),
    Tool("detect_language", "Detect the language of a given text",
         {"text": _str("The text to analyze")}, ["text"], _language),
    Tool("get_movie_details", "Get details about a movie",
         {"title": _str("The title of the movie")}, ["title"], _movie),
    Tool("search_books", "Search for books by keyword",
         {"query": _str("The search keyword")}, ["query"], _books),
    Tool("create_todo", "Create a new todo item",
         {"title": _str("The task"), "due_date": _str("The due date, YYYY-MM-DD")},
         ["title", "due_date"], _todo),
]

# --------------------------------------------------------------------------------------------------
# plain questions (general chat, math, code)

GENERAL_QA = [
    ("What is the capital of France?", "The capital of France is Paris."),
    ("What is the capital of Japan?", "The capital of Japan is Tokyo."),
    ("Who wrote Romeo and Juliet?", "Romeo and Juliet was written by William Shakespeare."),
    ("How many days are in a leap year?", "A leap year has 366 days."),
    ("What is the boiling point of water?", "Water boils at 100 degrees Celsius at sea level."),
    ("What is the largest planet in our solar system?", "Jupiter is the largest planet in our solar system."),
    ("Can you recommend a good habit for productivity?", "Try planning your three most important tasks each morning."),
    ("What does a CPU do?", "A CPU executes the instructions of a program."),
    ("Tell me a fun fact.", "Octopuses have three hearts."),
    ("What is the chemical symbol for gold?", "The chemical symbol for gold is Au."),
    ("How many continents are there?", "There are seven continents."),
    ("What is the speed of light?", "Light travels at about 299,792 km per second."),
    ("Say hello in Spanish.", "Hola!"),
    ("What is a synonym for happy?", "A synonym for happy is joyful."),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci painted the Mona Lisa."),
    ("Hi! How are you today?", "I'm doing well, thank you! How can I help you today?"),
    ("Can you book a flight for me?", "I'm sorry, but I can't book flights. I can help you plan the trip, though."),
    ("Order a pizza for me, please.", "I'm sorry, but I can't place orders. I can suggest some pizza recipes instead."),
]

CODE_QA = [
    ("Write a Python function that returns the square of a number.",
     "```python\ndef square(x):\n    return x * x\n```"),
    ("How do I reverse a list in Python?", "Use `lst[::-1]` or `lst.reverse()`."),
    ("Write a JavaScript function that adds two numbers.",
     "```javascript\nfunction add(a, b) {\n  return a + b;\n}\n```"),
    ("How do I read a file in Python?", "```python\nwith open(\"data.txt\") as f:\n    text = f.read()\n```"),
    ("What does `len()` do in Python?", "`len()` returns the number of items in a container."),
    ("Write a SQL query that counts the rows of a table named users.", "```sql\nSELECT COUNT(*) FROM users;\n```"),
]

SYSTEM_TOOLS = [
    "You are a helpful assistant with access to the following functions. Use them if required -",
    "You are a helpful assistant with access to the following functions. Use them if required.",
    "You are a helpful assistant.",
]
SYSTEM_PLAIN = [
    "You are a helpful assistant, with no access to external functions.",
    "You are a helpful assistant.",
    "You are a friendly and concise assistant.",
]


def _math(rng: random.Random) -> tuple[str, str, str]:
    """(question, reasoning, answer) with a correct result."""
    kind = rng.randrange(5)
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    if kind == 0:
        return (f"What is {a} + {b}?", f"{a} + {b} = {a + b}.", f"{a} + {b} = {a + b}.")
    if kind == 1:
        return (f"What is {a} * {b}?", f"{a} * {b} = {a * b}.", f"The answer is {a * b}.")
    if kind == 2:
        hi, lo = max(a, b), min(a, b)
        return (f"Compute {hi} - {lo}.", f"{hi} - {lo} = {hi - lo}.", f"{hi} - {lo} = {hi - lo}.")
    if kind == 3:
        x = rng.randint(1, 20)
        c = rng.randint(1, 30)
        k = rng.randint(2, 9)
        return (f"Solve for x: {k}x + {c} = {k * x + c}",
                f"Subtract {c}: {k}x = {k * x}. Divide by {k}: x = {x}.", f"x = {x}")
    n = rng.randint(3, 12)
    return (f"What is {n} squared?", f"{n} * {n} = {n * n}.", f"{n} squared is {n * n}.")


# --------------------------------------------------------------------------------------------------
# examples


@dataclass
class Example:
    kind: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    reasoning: str
    response: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # [{"name", "arguments": dict}]
    thinking: bool = True


def _call_reasoning(rng: random.Random, tool: Tool, sc: Scenario) -> str:
    return rng.choice([
        f"The user wants {sc.goal}. I can use the {tool.name} function for this.",
        f"The user is asking for {sc.goal}. I should call {tool.name}.",
        f"I need {sc.goal}. The {tool.name} tool does this, so I will call it.",
        f"To answer, I need {sc.goal}. Let me call {tool.name}.",
    ])


def _answer_reasoning(rng: random.Random, tool: Tool) -> str:
    return rng.choice([
        f"The {tool.name} function returned the result. I will tell the user.",
        "The tool returned the data. Now I can answer.",
        f"I have the result from {tool.name}. Let me summarize it.",
    ])


def _tool_set(rng: random.Random, tool: Tool) -> list[dict[str, Any]]:
    others = [t for t in TOOLS if t is not tool]
    chosen = [tool] + rng.sample(others, rng.choice([0, 0, 1, 1, 2, 2, 4]))
    rng.shuffle(chosen)
    return [t.schema() for t in chosen]


def _prior_turns(rng: random.Random) -> list[dict[str, Any]]:
    """Sometimes an earlier, unrelated exchange (multi-turn chat)."""
    if rng.random() < 0.75:
        return []
    q, a = rng.choice(GENERAL_QA)
    return [{"role": "user", "content": q}, {"role": "assistant", "content": a}]


def glaive_call(rng: random.Random) -> Example:
    tool = rng.choice(TOOLS)
    sc = tool.scenario(rng)
    msgs = [{"role": "system", "content": rng.choice(SYSTEM_TOOLS)}] + _prior_turns(rng)
    msgs.append({"role": "user", "content": sc.question})
    return Example("glaive_call", msgs, _tool_set(rng, tool), _call_reasoning(rng, tool, sc),
                   tool_calls=[{"name": tool.name, "arguments": sc.arguments}])


def glaive_result(rng: random.Random) -> Example:
    """An earlier call and its result are in the prompt; the model answers in text."""
    tool = rng.choice(TOOLS)
    sc = tool.scenario(rng)
    call_id = f"functions.{tool.name}:0"
    msgs = [{"role": "system", "content": rng.choice(SYSTEM_TOOLS)}, {"role": "user", "content": sc.question}]
    call: dict[str, Any] = {"type": "function", "function": {"name": tool.name, "arguments": json.dumps(sc.arguments)}}
    if rng.random() < 0.7:  # sources without ids let the template number the call
        call["id"] = call_id
    msgs.append({"role": "assistant", "content": "", "tool_calls": [call]})
    msgs.append({"role": "tool", "tool_call_id": call_id, "name": tool.name, "content": json.dumps(sc.result)})
    return Example("glaive_result", msgs, _tool_set(rng, tool), _answer_reasoning(rng, tool), response=sc.answer)


def glaive_refuse(rng: random.Random) -> Example:
    """Tools are declared but the question needs none of them."""
    tool = rng.choice(TOOLS)
    q, a = rng.choice(GENERAL_QA[-2:] + GENERAL_QA[:6])
    msgs = [{"role": "system", "content": rng.choice(SYSTEM_TOOLS)}, {"role": "user", "content": q}]
    reasoning = rng.choice([f"The user asks something that {tool.name} cannot do. I will answer directly.",
                            "None of the functions are needed here. I can answer directly."])
    return Example("glaive_refuse", msgs, _tool_set(rng, tool), reasoning, response=a)


def general_chat(rng: random.Random) -> Example:
    msgs: list[dict[str, Any]] = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": rng.choice(SYSTEM_PLAIN)})
    msgs += _prior_turns(rng)
    if rng.random() < 0.75:
        q, a = rng.choice(GENERAL_QA)
        reasoning = rng.choice(["The user asks a simple question. A short answer is enough.",
                                "This is a factual question. I know the answer.",
                                f"Let me think. {a}"])
    elif rng.random() < 0.5:
        q, a = rng.choice(CODE_QA)
        reasoning = rng.choice(["The user wants a short code example.", "A small snippet answers this."])
    else:
        topic = rng.choice(TOPICS)
        q = rng.choice([f"Explain {topic} in one sentence.", f"Give me a short summary of {topic}."])
        a = f"In short, {topic} is a broad subject; the key idea is easy to learn step by step."
        reasoning = f"The user wants a brief explanation of {topic}. One sentence is enough."
    msgs.append({"role": "user", "content": q})
    return Example("general", msgs, None, reasoning, response=a)


def noisy_question(rng: random.Random) -> Example:
    """A user message the generator has no template for (odd words, symbols, other scripts).

    Real demo prompts come from public datasets the tiny model never saw; this keeps its output
    structure stable when the prompt text is unfamiliar.
    """
    alphabet = "abcdefghijklmnopqrstuvwxyz     ,.?!0123456789-+*/()[]{}:;'\"éüßçñ日本語中文한국어ДЖЯ"
    words = []
    for _ in range(rng.randint(3, 40)):
        if rng.random() < 0.5:
            words.append(rng.choice(WORDS + INGREDIENTS + CITIES + TOPICS + NEWS))
        else:
            words.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 9))))
    msgs: list[dict[str, Any]] = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": rng.choice(SYSTEM_PLAIN + SYSTEM_TOOLS)})
    msgs.append({"role": "user", "content": " ".join(words)})
    reasoning = rng.choice(["The request is unclear. I will ask the user for more details.",
                            "I am not sure what the user means. Let me ask a clarifying question."])
    response = rng.choice(["Could you please give me more details about what you need?",
                           "I'm not sure I understand. Can you rephrase your question?"])
    return Example("noisy", msgs, None, reasoning, response=response)


def math_question(rng: random.Random) -> Example:
    q, reasoning, a = _math(rng)
    msgs: list[dict[str, Any]] = []
    if rng.random() < 0.3:
        msgs.append({"role": "system", "content": rng.choice(SYSTEM_PLAIN)})
    msgs.append({"role": "user", "content": q})
    return Example("math", msgs, None, reasoning, response=a)


GENERATORS: list[tuple[float, Callable[[random.Random], Example]]] = [
    (0.33, glaive_call),
    (0.17, glaive_result),
    (0.08, glaive_refuse),
    (0.22, general_chat),
    (0.15, math_question),
    (0.05, noisy_question),
]


def make_example(rng: random.Random) -> Example:
    r = rng.random()
    acc = 0.0
    for weight, gen in GENERATORS:
        acc += weight
        if r < acc:
            ex = gen(rng)
            break
    else:
        ex = GENERATORS[-1][1](rng)
    if not ex.tool_calls and rng.random() < 0.08:
        ex.thinking = False  # prompt ends with an empty think block; target has no reasoning
    return ex


def make_examples(seed: int, n: int) -> list[Example]:
    rng = random.Random(seed)
    return [make_example(rng) for _ in range(n)]


# --------------------------------------------------------------------------------------------------
# the target turn, as Kimi-K2.5 would emit it after a prompt ending in "<|im_middle|><think>"


def kimi_target_text(ex: Example) -> str:
    """Text of the generated turn: ``reasoning</think>response[tool section]<|im_end|>``.

    With ``thinking=False`` the prompt already ends in ``<think></think>``, so there is no reasoning part.
    """
    out = ""
    if ex.thinking:
        out += ex.reasoning + "</think>"
    out += ex.response
    if ex.tool_calls:
        out += "<|tool_calls_section_begin|>"
        for i, call in enumerate(ex.tool_calls):
            out += (f"<|tool_call_begin|>functions.{call['name']}:{i}<|tool_call_argument_begin|>"
                    f"{json.dumps(call['arguments'])}<|tool_call_end|>")
        out += "<|tool_calls_section_end|>"
    return out + "<|im_end|>"


# --------------------------------------------------------------------------------------------------
# tokenizer training corpus

_FILLER = (
    "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step. "
    "Please provide more details so I can help you. Here is a summary of the main points, followed by an example. "
    "In this guide we explain how to install the package, configure it, and run the tests. "
    "Numbers like 3.14, 2048, 1e-5 and -42 appear in data. Use `pip install` to add a dependency. "
    "def main():\n    for i in range(10):\n        print(i)\n\nif __name__ == \"__main__\":\n    main()\n"
    "const x = [1, 2, 3].map((v) => v * 2);\nSELECT name, age FROM people WHERE age > 30 ORDER BY name;\n"
    "{\"id\": 1, \"name\": \"example\", \"tags\": [\"a\", \"b\"], \"active\": true, \"score\": null}\n"
)


def corpus_texts(seed: int, n: int) -> list[str]:
    """Plain text pieces for BPE training: everything our templates place between special tokens."""
    rng = random.Random(seed)
    texts = [_FILLER] * 20
    texts.append("You are Kimi, an AI assistant created by Moonshot AI.")
    texts.append("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                 "You are provided with function signatures within XML tags:\n"
                 "For each function call, return a json object with function name and arguments within XML tags:\n"
                 "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n")
    for _ in range(n):
        ex = make_example(rng)
        parts = ["system", "user", "assistant", "tool", "tool_declare"]
        for m in ex.messages:
            if m.get("content"):
                parts.append(m["content"])
            for c in m.get("tool_calls", []):
                parts.append(f"functions.{c['function']['name']}:0")
                parts.append(c["function"]["arguments"])
            if m["role"] == "tool":
                parts.append(f"## Return of {m['tool_call_id']}\n{m['content']}")
        if ex.tools:
            parts.append(json.dumps(ex.tools, separators=(",", ":")))
            parts.append("\n".join(json.dumps(t) for t in ex.tools))
        parts += [ex.reasoning, ex.response]
        for c in ex.tool_calls:
            parts.append(f"functions.{c['name']}:0")
            parts.append(json.dumps(c["arguments"]))
            parts.append(json.dumps({"name": c["name"], "arguments": c["arguments"]}))
        texts.append(rng.choice(["\n", "\n\n"]).join(p for p in parts if p))
    return texts
