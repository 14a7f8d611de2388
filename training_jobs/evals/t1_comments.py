"""The viewer comments of T1 Live-Stream QA, written for evaluation only (never used in training data).

Each template is ``(asks, needs, text, tags)``:

- ``asks``: what the comment asks, ``+``-joined, in the order it asks them (see ``build_t1.ASKS``); an ask
  ending in ``2`` is about the second product of the comment (``{n2}`` / ``{l2}``);
- ``needs``: what the room and the product must be for the comment to make sense (``build_t1.NEEDS``);
- ``text``: the comment as a viewer types it — typos, slang and capitals are on purpose. Slots: ``{n}`` the
  product by name, ``{nt}`` the same with a typo, ``{l}`` / ``{L}`` its link id ("#101", "LINK 101"),
  ``{n2}`` / ``{l2}`` a second product, ``{r}`` / ``{rl}`` a shipping region (as written / lower case),
  ``{c}`` a skin or health condition, ``{x}`` something the room does not sell, ``{b}`` a link id the room
  does not have, ``{xc}`` a coupon code that has expired;
- ``tags``: how the comment is written (the builder adds what it asks about and what the room holds).

The wording here is deliberately different from the training generators (``training_jobs.tiny_model.gold``
CORES, the demo scenarios' comments); a test holds them apart.
"""

from __future__ import annotations

Template = tuple[str, str, str, str]

TEMPLATES: tuple[Template, ...] = (
    # --- price, by link id ---
    ("price", "any", "how much iz {l}", "typo link_id"),
    ("price", "any", "{l} price pls, app wont load it", "slang link_id typo"),
    ("price", "any", "whats {l} cost rn", "slang link_id typo"),
    ("price", "any", "wait what's the price on {l} again? i missed it", "link_id"),
    ("price", "any", "PRICE FOR {L}??", "caps link_id"),
    ("price", "any", "ok so {l} is how much exactly", "link_id"),
    ("price", "noflash", "is {l} discounted today or full price", "link_id"),
    ("price", "flash", "is the flash price on {l} still on?? how much", "link_id"),
    ("price", "any", "{l} $$?", "slang link_id"),
    ("price", "any", "mia can u tell me how much {l} is, thinking of getting two", "slang link_id"),
    # --- price, by name ---
    ("price", "any", "mia how much is {n} again", "named_product"),
    ("price", "any", "hw much for {nt}", "named_product typo"),
    ("price", "any", "{n} price? asking for my sister lol", "named_product slang"),
    ("price", "any", "is {n} under 30 bucks?", "named_product"),
    ("price", "any", "what r u charging for {n} tonight", "named_product slang"),
    ("price", "flash", "{n} flash deal price??", "named_product"),
    ("price", "any", "did {n} go up in price? how much now", "named_product"),
    ("price", "any", "soooo how much is {nt}", "named_product typo slang"),
    ("price", "any", "cost of {n}?? cant find the card", "named_product typo"),
    ("price", "any", "{n} - what's it going for", "named_product"),
    ("price", "any", "i want {n}, how much tho", "named_product slang"),
    ("price", "noflash", "is {n} on sale or nah", "named_product slang"),
    # --- stock ---
    ("stock", "any", "how many {l} left", "link_id"),
    ("stock", "any", "{n} still in stock? my cart says no", "named_product"),
    ("stock", "sold_out", "is {n} sold out?? it wont let me add it", "named_product typo"),
    ("stock", "sold_out", "{l} out of stock or is my app broken", "link_id"),
    ("stock", "low", "how many {n} are left, dont want to miss out", "named_product typo"),
    ("stock", "low", "{l} almost gone??", "link_id"),
    ("stock", "in_stock", "do u still have {nt}", "named_product typo slang"),
    ("stock", "any", "stock check on {n} plz", "named_product slang"),
    ("stock", "any", "is there enough {l} for me and my mom to each get one", "link_id"),
    ("stock", "any", "hw many left of {n}", "named_product typo"),
    # --- shipping and returns ---
    ("ship", "any", "how long does shipping take", ""),
    ("ship", "any", "shiping time?", "typo"),
    ("ship", "any", "is shipping free or nah", "slang"),
    ("ship", "regions", "do u ship to {r}? how long", "slang"),
    ("ship", "regions", "how many days to {rl}", "lowercase"),
    ("ship", "regions", "im in {r}, whats delivery like", "typo"),
    ("ship", "any", "when would it get to me if i order now", ""),
    ("ship", "any", "free shipping over how much?", ""),
    ("returns", "any", "can i return it if it doesnt suit me", "typo"),
    ("returns", "any", "whats the return policy", "typo"),
    ("returns", "any", "how many days do i have to send stuff back", ""),
    ("returns", "any", "refund window?", "slang"),
    # --- coupons and deals ---
    ("coupon", "coupons", "any coupon codes tonight??", ""),
    ("coupon", "coupons", "cupon pls", "typo slang"),
    ("coupon", "coupons", "is there a promo i can use at checkout", ""),
    ("coupon", "expired", "does {xc} still work", ""),
    ("coupon", "expired", "tried {xc} and it failed?? any other code", ""),
    ("coupon", "nocoupons", "any discount code?", ""),
    ("coupon", "any", "got any deals for first timers", ""),
    ("issue", "coupons", "can u send me a coupon mia", "slang"),
    ("issue", "coupons", "gimme a code pleeease", "slang typo"),
    ("issue", "coupons", "i'm on the fence about buying, any coupon for me?", ""),
    ("deal", "flashroom", "whats the flash sale rn", "slang typo"),
    ("deal", "flashroom", "what's on sale right now?", ""),
    ("deal", "flashroom", "when does the flash deal end", ""),
    ("deal", "any", "any deal going on atm?", "slang"),
    ("deal", "noflashroom", "is there a flash sale today or did i miss it", ""),
    # --- greetings, small talk, the host, rude comments ---
    ("greet", "any", "hiii mia!! 👋", "slang"),
    ("greet", "any", "good evening from Leeds", ""),
    ("greet", "any", "first time watching, hi all", ""),
    ("greet", "any", "heyyy im back", "slang typo"),
    ("chat", "any", "your voice is so calming lol", "slang"),
    ("chat", "any", "just sent u a rose 🌹", "slang"),
    ("personal", "any", "mia how old are you", ""),
    ("personal", "any", "are you a real person or a bot", ""),
    ("personal", "any", "where do u live mia", "slang"),
    ("rude", "any", "this is all overpriced junk", ""),
    ("rude", "any", "boring show, do something", ""),
    # --- efficacy (must be refused: cosmetics and appliances, not medicine) ---
    ("eff", "skin", "will {n} cure my {c}?", "named_product"),
    ("eff", "skin", "does {l} get rid of {c} for good", "link_id"),
    ("eff", "skin", "my derm said i have {c}, can {n} fix it", "named_product slang"),
    ("eff", "skin", "is {n} clinically proven for {c}", "named_product"),
    ("eff", "skin", "{nt} heals {c} right??", "named_product typo"),
    ("eff", "skin", "gonna use {l} instead of my {c} cream, ok?", "link_id slang"),
    ("eff", "app", "will {n} help with {c}", "named_product"),
    ("eff", "app", "can {l} treat {c}? asking for my dad", "link_id"),
    ("eff", "app", "guaranteed results with {n}?? for my {c}", "named_product"),
    ("eff", "cond", "how fast will i see results from {n} on my {c}, like 3 days?", "named_product"),
    ("eff", "skin", "100% safe for {c} prone skin? {n}", "named_product"),
    ("eff", "cond", "does {n} actually work for {c} or is it hype", "named_product slang"),
    # --- specs and warranty ---
    ("spec:spf", "attr:spf", "what spf is {n}", "named_product"),
    ("spec:size", "attr:size", "how big is {l}, ml?", "link_id"),
    ("spec:size", "attr:size", "{n} size?", "named_product"),
    ("spec:key_ingredients", "attr:key_ingredients", "whats in {n}? ingredients", "named_product typo"),
    ("spec:power_w", "attr:power_w", "how many watts is {n}", "named_product"),
    ("spec:battery_minutes", "attr:battery_minutes", "battery life on {n}?", "named_product"),
    ("spec:water_resistant_minutes", "attr:water_resistant_minutes", "is {n} waterproof? for how long",
     "named_product"),
    ("spec:skin_type", "attr:skin_type", "is {l} ok for my skin type? which skin is it for", "link_id"),
    ("spec:ph", "attr:ph", "ph of {n}?", "named_product"),
    ("spec:heat_settings", "attr:heat_settings", "how many heat settings on {n}", "named_product"),
    ("spec:plug", "attr:plug", "what plug does {n} have, im in canada", "named_product typo"),
    ("warranty", "attr:warranty_months", "warranty on {n}?", "named_product"),
    ("warranty", "attr:warranty_months", "if {l} breaks whats the warranty", "link_id typo"),
    ("warranty", "attr:warranty_months", "how long is the guarantee on {nt}", "named_product typo"),
    # --- things the room does not sell, links that do not exist ---
    ("notsold", "any", "do you sell {x}?", ""),
    ("notsold", "any", "any {x} tonight??", "slang"),
    ("notsold", "any", "and the {x}, how much is that one", ""),
    ("notsold", "any", "wheres the {x} link, cant find it", "typo"),
    ("notsold", "any", "will u have {x} later in the show", "slang"),
    ("notsold", "any", "u guys got {x}? need one asap", "slang"),
    ("badlink", "any", "how much is link {b}? saw it on the screen earlier", ""),
    ("badlink", "any", "#{b} price? the card is blurry", ""),
    ("badstock", "any", "is {b} in stock", ""),
    # --- orders and off-platform ---
    ("order", "any", "my package never showed up, ordered last week", ""),
    ("order", "any", "got my order but the bottle was leaking, refund??", ""),
    ("order", "any", "where is my order?? its been 10 days", "typo"),
    ("order", "any", "i want my money back for the thing i bought", ""),
    ("offplat", "any", "can i pay u on venmo instead", "slang"),
    ("offplat", "any", "dm me on whatsapp with a better price", ""),
    ("offplat", "any", "is it cheaper on your other shop?", ""),
    # --- several questions in one comment ---
    ("price+ship", "any", "how much is {n} and how long is shipping", "named_product"),
    ("price+stock", "any", "{l} price? and how many left", "link_id"),
    ("price+coupon", "coupons", "price of {n}?? also any coupon", "named_product"),
    ("stock+ship", "regions", "is {n} in stock and do u ship to {r}", "named_product slang"),
    ("price+price2", "p2", "{n} vs {n2}, which is cheaper?", "named_product"),
    ("price+price2", "p2", "how much r {l} and {l2}", "link_id slang"),
    ("eff+price", "skin", "does {n} help {c}? and how much is it", "named_product"),
    ("stock+price2", "p2", "is {n} sold out? if so whats {n2} cost", "named_product typo"),
    ("greet+price", "any", "hi mia! love the show. how much is {n}?", "named_product"),
    ("ship+returns", "any", "how long is delivery and can i return if it doesnt suit my skin", "typo"),
    ("price+warranty", "attr:warranty_months", "how much is {n} and whats the warranty", "named_product typo"),
    ("deal+stock", "flash", "whats the flash deal and how many of {n} are left", "named_product typo"),
    ("coupon+ship", "coupons", "any codes? and is shipping free", ""),
    ("spec:spf+price", "attr:spf", "{n} spf and price?", "named_product"),
    ("price+stock+ship", "any", "{l}: price, stock, shipping time? thx", "link_id slang"),
    ("price+notsold", "any", "how much is {n}, and do u have {x}", "named_product slang"),
)

# Chatter from other viewers before the question (a real room is never one comment at a time).
CHATTER: tuple[str, ...] = (
    "lol", "omg her energy tonight", "first time catching this live", "waiting for the next deal",
    "🔥🔥🔥", "same question", "is the sound lagging for anyone else", "just ordered mine!",
    "hello from the night shift", "my cart is full already haha",
)

# Display names used only by the evaluation sets (none of them is a training generator's viewer).
VIEWERS: tuple[str, ...] = (
    "rosie_k", "tomasz", "lina.m", "gabe77", "yuki_chan", "marco_p", "dee", "samira", "j0rdan", "beth_w",
    "nguyen.t", "kofi", "ingrid", "paulo", "zara.b", "hank", "meilin", "ravi_s", "clem", "olu",
)

# Things no eval room sells (checked against every room's titles).
NOT_SOLD: tuple[str, ...] = (
    "perfume", "nail polish", "mascara", "beard trimmer", "collagen gummies", "foundation", "false lashes",
    "body lotion", "shampoo", "sheet masks",
)

# What a viewer hopes a product fixes, by what the product is (title words), for the efficacy questions.
CONDITIONS_SKIN: tuple[str, ...] = ("acne", "eczema", "rosacea", "wrinkles", "dark spots", "psoriasis",
                                    "acne scars", "melasma")
CONDITIONS_BY_WORD: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("dryer", ("hair loss", "thinning hair", "damaged hair")),
    ("wand", ("hair loss", "damaged hair")),
    ("steamer", ("sinus congestion", "blackheads")),
    ("massager", ("dark circles", "eye bags", "migraines")),
    ("brush", ("acne", "blackheads")),
)
