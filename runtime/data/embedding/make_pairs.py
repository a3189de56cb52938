"""Writes tuner's bundled query/positive pair set (hand-written facts, several kinds).

Regenerate with: python runtime/data/embedding/make_pairs.py (deterministic)."""
# ruff: noqa: E501  (one line per fact table: the data reads as written)
import json
import random

capitals = """France Paris|Germany Berlin|Italy Rome|Spain Madrid|Portugal Lisbon|Greece Athens|Poland Warsaw|Austria Vienna|Hungary Budapest|Sweden Stockholm|Norway Oslo|Finland Helsinki|Denmark Copenhagen|Ireland Dublin|Belgium Brussels|Netherlands Amsterdam|Switzerland Bern|Czechia Prague|Romania Bucharest|Bulgaria Sofia|Serbia Belgrade|Croatia Zagreb|Ukraine Kyiv|Russia Moscow|Turkey Ankara|Egypt Cairo|Kenya Nairobi|Nigeria Abuja|Ghana Accra|Ethiopia Addis Ababa|Morocco Rabat|Algeria Algiers|Tunisia Tunis|Senegal Dakar|Japan Tokyo|China Beijing|India New Delhi|Pakistan Islamabad|Bangladesh Dhaka|Nepal Kathmandu|Thailand Bangkok|Vietnam Hanoi|Indonesia Jakarta|Philippines Manila|Malaysia Kuala Lumpur|South Korea Seoul|Mongolia Ulaanbaatar|Iran Tehran|Iraq Baghdad|Saudi Arabia Riyadh|Israel Jerusalem|Jordan Amman|Lebanon Beirut|Syria Damascus|Afghanistan Kabul|Canada Ottawa|Mexico Mexico City|Cuba Havana|Brazil Brasilia|Argentina Buenos Aires|Chile Santiago|Peru Lima|Colombia Bogota|Venezuela Caracas|Ecuador Quito|Bolivia Sucre|Uruguay Montevideo|Paraguay Asuncion|Australia Canberra|New Zealand Wellington|Iceland Reykjavik|Estonia Tallinn|Latvia Riga|Lithuania Vilnius"""
elements = "hydrogen H|helium He|lithium Li|carbon C|nitrogen N|oxygen O|fluorine F|neon Ne|sodium Na|magnesium Mg|aluminium Al|silicon Si|phosphorus P|sulfur S|chlorine Cl|argon Ar|potassium K|calcium Ca|iron Fe|copper Cu|zinc Zn|silver Ag|gold Au|tin Sn|lead Pb|mercury Hg|platinum Pt|uranium U|nickel Ni|cobalt Co|titanium Ti|iodine I|bromine Br|chromium Cr|manganese Mn|tungsten W"
young = "cow calf|dog puppy|cat kitten|horse foal|sheep lamb|goat kid|pig piglet|duck duckling|goose gosling|lion cub|bear cub|frog tadpole|kangaroo joey|swan cygnet|owl owlet|deer fawn|eagle eaglet|hen chick|seal pup|butterfly caterpillar"
opposites = "hot cold|big small|fast slow|happy sad|light dark|early late|open closed|full empty|hard soft|high low|rich poor|strong weak|young old|wet dry|loud quiet|thick thin|cheap expensive|heavy light|inside outside|push pull|buy sell|win lose|begin end|accept refuse|arrive depart|remember forget|increase decrease|ancient modern|brave cowardly|clean dirty|deep shallow|friend enemy|noisy silent|sharp blunt|sweet sour|tight loose|vertical horizontal|wide narrow|wild tame|asleep awake"
past = "run ran|eat ate|go went|see saw|write wrote|take took|give gave|speak spoke|drink drank|swim swam|sing sang|fly flew|drive drove|break broke|choose chose|forget forgot|freeze froze|steal stole|wake woke|ride rode|teach taught|think thought|bring brought|buy bought|catch caught|fight fought|seek sought|sell sold|tell told|build built"
colours = "grass green|sky blue|snow white|coal black|blood red|banana yellow|orange orange|chocolate brown|lavender purple|flamingo pink|ash grey|emerald green|sapphire blue|ruby red|lemon yellow|milk white|tar black|carrot orange|plum purple|rose red"
langs = "Brazil Portuguese|Mexico Spanish|Austria German|Egypt Arabic|Iran Persian|Japan Japanese|China Mandarin|Greece Greek|Poland Polish|Finland Finnish|Hungary Hungarian|Israel Hebrew|Turkey Turkish|Vietnam Vietnamese|Thailand Thai|Netherlands Dutch|Sweden Swedish|Norway Norwegian|Denmark Danish|Russia Russian"
inventors = "telephone:Alexander Graham Bell|light bulb:Thomas Edison|printing press:Johannes Gutenberg|theory of relativity:Albert Einstein|discovery of penicillin:Alexander Fleming|World Wide Web:Tim Berners-Lee|invention of dynamite:Alfred Nobel|radio:Guglielmo Marconi|steam engine:James Watt|first airplane flight:the Wright brothers|polio vaccine:Jonas Salk|laws of motion:Isaac Newton|theory of evolution:Charles Darwin|research on radioactivity:Marie Curie|periodic table:Dmitri Mendeleev|alternating current:Nikola Tesla"
pairs: list[tuple[str, str, str]] = []
def split(s):
    yield from s.split("|")
for item in split(capitals):
    words = item.split(" ")
    # country names may be two words; capitals known by lookup on the table above
    pass
cap = {}
for item in capitals.split("|"):
    parts = item.split(" ")
    for i in range(1, len(parts)):
        c, k = " ".join(parts[:i]), " ".join(parts[i:])
        if c in ("South", "New", "Saudi", "Addis", "Kuala", "Buenos", "Mexico") and i == 1:
            continue
        cap[c] = k
        break
fix = {"South Korea": "Seoul", "New Zealand": "Wellington", "Saudi Arabia": "Riyadh", "Ethiopia": "Addis Ababa", "Malaysia": "Kuala Lumpur", "Argentina": "Buenos Aires", "Mexico": "Mexico City", "India": "New Delhi"}
for c in list(cap):
    if c.startswith(("South", "New", "Saudi")):
        del cap[c]
cap.update(fix)
cap = {c: k for c, k in cap.items() if " " not in c or c in fix}
rng = random.Random(1)
ANS = ["the answer you are looking for is {}", "according to my notes the answer is {}", "I am fairly sure it is {}", "that would be {}, as far as I know"]
def add(q, a, kind):
    pairs.append((q, rng.choice(ANS).format(a), kind))
for c, k in cap.items():
    add(f"What is the capital of {c}?", k, "capital")
for item in elements.split("|"):
    n, s = item.split(" ")
    add(f"chemical symbol for {n}", s, "element")
for item in young.split("|"):
    a, y = item.split(" ")
    add(f"what is a baby {a} called", f"a {y}", "young")
for item in opposites.split("|"):
    a, b = item.split(" ")
    add(f"opposite of {a}", b, "opposite")
for item in past.split("|"):
    a, b = item.split(" ")
    add(f"past tense of the verb to {a}", b, "past")
for item in colours.split("|"):
    a, b = item.split(" ")
    add(f"what colour is {a}", b, "colour")
for item in langs.split("|"):
    a, b = item.split(" ")
    add(f"main language spoken in {a}", b, "language")
for item in inventors.split("|"):
    thing, who = item.split(":")
    add(f"who is known for the {thing}", who, "person")
random.Random(0).shuffle(pairs)
with open(__import__("os").path.join(__import__("os").path.dirname(__file__), "pairs.jsonl"), "w") as f:
    for q, p, kind in pairs:
        f.write(json.dumps({"query": q, "positive": p, "kind": kind}) + "\n")
print(len(pairs))
