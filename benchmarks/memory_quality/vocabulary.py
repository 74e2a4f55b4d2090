"""Words and sentence templates the history generator draws from.

Templates use ``{name}`` (full name), ``{first}`` (first name) and the fields
of a slot's value (``{city}``, ``{company}``, ...); ``{a_role}`` is the role
with its article. ``{when}`` is a month and year ("March 2024"), ``{year}`` a
year, ``{old}`` the value a change replaces. Statements of one slot are
paraphrases of each other: each says the same fact, no more and no less.
Nothing here uses pronouns, so no name needs a gender.
"""

from __future__ import annotations

FIRST_NAMES = (
    "Ana Bruno Chiara Dmitri Elif Farid Grace Hiro Ines Jonas Kavya Lars Mei Nadia Omar "
    "Priya Quentin Rosa Samir Tomas Uma Viktor Wen Ximena Yusuf Zara Aisha Ben Carmen Diego "
    "Emma Felix Gabriela Hana Ivan Julia Kenji Leila Marco Nina Olu Paula Rahul Sofia Theo "
    "Valentina Wanjiru Yara Zoltan Amara Bjorn Chen Dara Esther Fatima Giulia Hugo Ingrid "
    "Jamal Kai Lucia Mateo Noor Oskar Pedro Rin Selin Tariq Ursula Vera Will Yuki Zeynep "
    "Arjun Beatriz Cyril Dalia Emeka Freya Goran Helena Idris Jana Kofi Lena Milan Nour Otto "
    "Pilar Ravi Sana Tobias Vikram Mira Luca Anouk Soren Thandiwe"
).split()

LAST_NAMES = (
    "Silva Okafor Rossi Ivanova Yilmaz Haddad Kim Tanaka Moreau Berg Iyer Nielsen Wang "
    "Hassan Patel Dubois Garcia Novak Costa Kowalski Mensah Fischer Lindqvist Alvarez "
    "Nakamura Obi Schmidt Romano Petrov Chowdhury Brennan Keller Santos Varga Adeyemi "
    "Laurent Horvat Mueller Sato Ortega Nguyen Jansen Kaur Osei Weber Popescu Castillo "
    "Lehmann Demir Reyes Abiodun Hoffmann Ferrari Takahashi Lund Mahlangu Quinn Sandoval "
    "Bauer Eriksson Farouk Gallo Holm Ito Jovanovic Kariuki Lopez Marsh Nowak Olsen Perez "
    "Rahman Sorensen Toure Ueda Vidal Wolfe Zhou"
).split()

RELATIONS = (
    "colleague",
    "friend",
    "neighbour",
    "cousin",
    "client",
    "teammate",
    "old classmate",
    "mentor",
)

CITIES = (
    "Lisbon Porto Berlin Munich Hamburg Vienna Zurich Geneva Amsterdam Rotterdam Brussels "
    "Copenhagen Stockholm Oslo Helsinki Dublin Edinburgh Manchester London Paris Lyon "
    "Marseille Barcelona Madrid Valencia Milan Turin Rome Naples Athens Istanbul Warsaw "
    "Krakow Prague Budapest Bucharest Sofia Belgrade Zagreb Ljubljana Tallinn Riga Vilnius "
    "Toronto Montreal Vancouver Boston Chicago Denver Seattle Austin Nairobi Lagos Accra "
    "Cairo Dubai Mumbai Bangalore Singapore Seoul Osaka Melbourne Auckland"
).split()

COMPANIES = (
    "Northwind Traders",
    "Brightline Health",
    "Helix Robotics",
    "Bluefin Analytics",
    "Cobalt Logistics",
    "Tessellate Labs",
    "Quarry Bank",
    "Meridian Insurance",
    "Larkspur Games",
    "Vantage Energy",
    "Orchard Foods",
    "Pinecrest Media",
    "Granite Systems",
    "Silverline Airways",
    "Kestrel Security",
    "Driftwood Studios",
    "Aurora Biotech",
    "Harbor Freight Lines",
    "Summit Legal",
    "Juniper Networks Lab",
    "Redwood Pharma",
    "Atlas Consulting",
    "Beacon Schools",
    "Cinder Hardware",
    "Evergreen Property",
    "Falconer Capital",
    "Glasshouse Design",
    "Ironbridge Construction",
    "Lumen Optics",
    "Mosaic Retail",
    "Nimbus Cloud",
    "Opal Telecom",
    "Parallax Research",
    "Quill Publishing",
    "Riverstone Hospital",
    "Saffron Hotels",
    "Tidewater Shipping",
    "Umbra Photonics",
    "Verdant Farms",
    "Wavelength Audio",
    "Yarrow Cosmetics",
    "Zephyr Mobility",
    "Alder Software",
    "Birchwood University",
    "Canopy Travel",
    "Delta Semiconductors",
    "Ember Foods",
    "Fjord Fisheries",
)

ROLES = (
    "data engineer",
    "product manager",
    "backend developer",
    "frontend developer",
    "UX researcher",
    "site reliability engineer",
    "engineering manager",
    "data scientist",
    "security analyst",
    "technical writer",
    "sales director",
    "account executive",
    "financial controller",
    "HR business partner",
    "marketing lead",
    "nurse practitioner",
    "civil engineer",
    "architect",
    "research scientist",
    "operations manager",
    "legal counsel",
    "teacher",
    "pharmacist",
    "logistics coordinator",
    "quality assurance lead",
    "solutions architect",
    "customer success manager",
    "machine learning engineer",
    "office manager",
    "chief of staff",
)

PROJECTS = (
    "Falcon Atlas Borealis Cedar Dynamo Ember Fathom Glacier Harbor Ion Juniper Keystone "
    "Lighthouse Monsoon Nebula Obsidian Pegasus Quartz Raven Sierra Tundra Umbra Vortex "
    "Willow Xenon Yukon Zenith Aurora Basalt Comet Delta Echo Fjord Granite Horizon Iris "
    "Jade Kodiak Lotus Meridian Nimbus Orion Prism Quasar Redwood Sequoia Titan Unity "
    "Vanguard Wavelength"
).split()

DRINKS = (
    "oat milk flat white",
    "green tea",
    "double espresso",
    "chai latte",
    "sparkling water",
    "black coffee",
    "matcha latte",
    "rooibos tea",
    "cortado",
    "iced americano",
    "hot chocolate",
    "earl grey with milk",
    "decaf cappuccino",
    "yerba mate",
    "kombucha",
    "peppermint tea",
    "mocha",
    "cold brew",
    "ginger lemon tea",
    "almond milk latte",
    "jasmine tea",
    "turmeric latte",
    "filter coffee",
    "orange juice",
)

PET_SPECIES = (
    "dog",
    "cat",
    "parrot",
    "rabbit",
    "tortoise",
    "hamster",
    "corgi",
    "border collie",
    "tabby cat",
    "beagle",
    "goldfish",
    "greyhound",
)

PET_NAMES = (
    "Biscuit Pepper Mochi Luna Otis Ziggy Maple Nacho Pickles Juno Waffles Pixel Noodle "
    "Clementine Bowie Sushi Pretzel Olive Marble Tofu Ginger Socks Rocket Peanut Dumpling "
    "Fig Mango Basil Comet Pumpkin"
).split()

MONTHS = (
    "January February March April May June July August September October November December"
).split()

# The slots a person's facts fill, in the order facts are generated.
SLOTS = ("city", "employer", "role", "project", "drink", "employee_id", "pet")

# Paraphrases of a slot's fact: at least six each, so a fact can be said five
# different ways.
STATEMENTS: dict[str, tuple[str, ...]] = {
    "city": (
        "{name} lives in {city}.",
        "{first} is based in {city}.",
        "{first}'s home is in {city}.",
        "{name} resides in {city}.",
        "{first} lives in {city} these days.",
        "Home for {first} is {city}.",
        "{name} is living in {city} at the moment.",
        "{first} has a flat in {city} and lives there.",
    ),
    "employer": (
        "{name} works at {company}.",
        "{first} is employed by {company}.",
        "{first}'s employer is {company}.",
        "{first} has a job at {company}.",
        "{name} works for {company}.",
        "{first} is on the payroll at {company}.",
        "{first} is part of the staff at {company}.",
    ),
    "role": (
        "{name} works as {a_role}.",
        "{first}'s job title is {role}.",
        "{first} is {a_role} by profession.",
        "{name} has the title {role}.",
        "{first} currently holds the position of {role}.",
        "{name} is employed as {a_role}.",
        "At work, {first} is {a_role}.",
    ),
    "project": (
        "{name} is working on the {project} project.",
        "{first}'s current project is {project}.",
        "{first} spends most days on Project {project}.",
        "{name} is assigned to {project}.",
        "{first} is on the {project} team.",
        "{first}'s main focus at work is the {project} project.",
        "{name} contributes to {project} full time.",
    ),
    "drink": (
        "{name}'s favourite drink is {drink}.",
        "{first} always orders {drink}.",
        "{first} drinks {drink} every morning.",
        "{name} prefers {drink} to anything else.",
        "{first}'s go-to drink is {drink}.",
        "Whenever we grab drinks, {first} gets {drink}.",
        "{name} loves {drink}.",
    ),
    "employee_id": (
        "{name}'s employee ID is {employee_id}.",
        "{first}'s badge number is {employee_id}.",
        "{first} uses employee number {employee_id}.",
        "The staff ID for {name} is {employee_id}.",
        "{first}'s ID at work is {employee_id}.",
        "{name} badges in with {employee_id}.",
    ),
    "pet": (
        "{name} has a {species} called {pet_name}.",
        "{first}'s {species} is named {pet_name}.",
        "{pet_name} is {first}'s {species}.",
        "{name} owns a {species} named {pet_name}.",
        "{first} lives with a {species}, {pet_name}.",
        "{first} adopted a {species} called {pet_name} a while ago.",
    ),
}

# A first statement that dates the fact ("since 2019").
SINCE: dict[str, tuple[str, ...]] = {
    "city": (
        "{name} has lived in {city} since {year}.",
        "{first} has been based in {city} since {year}.",
    ),
    "employer": (
        "{name} has worked at {company} since {year}.",
        "{first} has been with {company} since {year}.",
    ),
    "role": ("{name} has been {a_role} since {year}.",),
    "project": ("{name} has been on the {project} project since {year}.",),
    "drink": ("{first} has been drinking {drink} every day since {year}.",),
    "employee_id": ("{name}'s employee ID has been {employee_id} since {year}.",),
    "pet": ("{name} has had a {species} called {pet_name} since {year}.",),
}

# A statement that the fact changed (the previous value is ``{old}``'s).
CHANGES: dict[str, tuple[str, ...]] = {
    "city": (
        "{name} moved to {city} in {when}.",
        "{first} relocated to {city} in {when}.",
        "{first} just moved to {city}.",
        "As of {when}, {name} lives in {city}.",
        "{first} left {old} and now lives in {city}.",
    ),
    "employer": (
        "{name} joined {company} in {when}.",
        "{first} started a new job at {company} in {when}.",
        "{first} left {old} for {company}.",
        "{name} switched employers and now works at {company}.",
        "As of {when}, {first} works at {company}.",
    ),
    "role": (
        "{name} became {a_role} in {when}.",
        "{first} was promoted to {role} in {when}.",
        "{first}'s new title is {role}.",
        "Since {when}, {name} has been working as {a_role}.",
    ),
    "project": (
        "{name} moved to the {project} project in {when}.",
        "{first} switched to Project {project} in {when}.",
        "{first} has been reassigned from {old} to {project}.",
        "Since {when}, {name} works on {project}.",
    ),
    "drink": (
        "{name} switched to {drink} in {when}.",
        "{first} has given up {old} and drinks {drink} now.",
        "These days {first} prefers {drink}.",
        "Since {when}, {name}'s go-to drink is {drink}.",
    ),
    "employee_id": (
        "{name} got a new employee ID, {employee_id}, in {when}.",
        "{first}'s new badge number is {employee_id}.",
        "Since {when}, {first}'s employee ID is {employee_id}.",
    ),
    "pet": ("{name} adopted a {species} called {pet_name} in {when}.",),
}

# A project that ended with no successor (yet).
ENDINGS = (
    "{first}'s work on {project} ended in {when}.",
    "The {project} project {first} was on wrapped up in {when}.",
    "{name} rolled off the {project} project in {when}.",
)

QUESTIONS_NOW: dict[str, tuple[str, ...]] = {
    "city": (
        "Where does {name} live now?",
        "Which city is {first} based in these days?",
        "Where is {name}'s home at the moment?",
    ),
    "employer": (
        "Where does {name} work now?",
        "Which company is {first} working for at the moment?",
        "Who is {name}'s current employer?",
    ),
    "role": (
        "What is {name}'s job title now?",
        "What does {first} do for a living these days?",
        "What is {name}'s current role?",
    ),
    "project": (
        "What project is {name} working on now?",
        "Which project is {first} on at the moment?",
    ),
    "drink": (
        "What does {name} like to drink these days?",
        "What is {first}'s go-to drink now?",
    ),
    "employee_id": (
        "What is {name}'s employee ID?",
        "What badge number does {first} use now?",
    ),
    "pet": (
        "What pet does {name} have?",
        "What is the name of {first}'s pet?",
    ),
}

QUESTIONS_THEN: dict[str, tuple[str, ...]] = {
    "city": (
        "Where did {name} live in {when}?",
        "Which city was {first} living in back in {when}?",
    ),
    "employer": (
        "Where was {name} working in {when}?",
        "Which company employed {first} in {when}?",
    ),
    "role": (
        "What was {name}'s job title in {when}?",
        "What role did {first} have in {when}?",
    ),
    "project": (
        "What project was {name} working on in {when}?",
        "Which project was {first} assigned to in {when}?",
    ),
    "drink": (
        "What was {name}'s favourite drink in {when}?",
        "What did {first} usually drink in {when}?",
    ),
    "employee_id": (
        "What was {name}'s employee ID in {when}?",
        "Which badge number did {first} have in {when}?",
    ),
    "pet": ("What pet did {name} have in {when}?",),
}

# Sentences about a person that name a slot's kind of value without stating
# the fact: the hard negatives of a search. Keyed by the slot they resemble.
NEAR_MISSES: dict[str, tuple[str, ...]] = {
    "city": (
        "{first} flew to {city} for a conference.",
        "{first} is thinking about moving to {city} one day.",
        "{first} spent a long weekend in {city}.",
    ),
    "employer": (
        "{first} had an interview at {company} but turned the offer down.",
        "{first} met a few people from {company} at a meetup.",
    ),
    "role": (
        "{first} mentioned an opening for {a_role} on another team.",
        "{first} is mentoring a junior {role}.",
    ),
    "project": (
        "{name} reviewed the design doc for {project}.",
        "{first} sat in on a {project} planning meeting.",
    ),
    "drink": (
        "{first} tried {drink} at the offsite and did not like it.",
        "{first} bought {drink} for the whole team.",
    ),
    "employee_id": ("{first} was given a temporary visitor pass, {employee_id}.",),
    "pet": ("{first} is looking after a friend's {species} this week.",),
}

# A superseded value mentioned as the past it is.
PAST_MENTIONS: dict[str, tuple[str, ...]] = {
    "city": ("{first} used to live in {city}.", "{first} still misses {city} sometimes."),
    "employer": (
        "{first} still has friends at {company} from the old days.",
        "{first} used to work at {company}.",
    ),
    "project": ("{first} used to work on {project}.",),
    "drink": ("{first} used to drink {drink} all the time.",),
}

# Notes an agent keeps that are about no one in particular.
NOTES = (
    "Remind me to renew the car insurance before {when}.",
    "I need to prepare slides for the quarterly review on {weekday}.",
    "Book a table for six on {weekday} evening.",
    "The team offsite is planned for {when}.",
    "Draft a reply to the landlord about the heating.",
    "Pick up the dry cleaning on {weekday}.",
    "Look into cheaper flights for the trip in {when}.",
    "The printer on the third floor is broken again.",
    "Send the budget spreadsheet to finance by {weekday}.",
    "Find a good book on negotiation.",
    "My dentist appointment moved to {weekday} at {hour}:00.",
    "The quarterly planning meeting is at {hour}:30 on {weekday}.",
    "I want to start running again, three times a week.",
    "Order a new charger for the laptop.",
    "The wifi password at the office changed on {weekday}.",
    "Renew the passport before {when}.",
    "Ask facilities about the broken blinds in room {room}.",
    "Our team retro is in room {room} on {weekday}.",
)

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")

# User turns that carry nothing to remember.
SMALL_TALK = (
    "Thanks!",
    "Perfect, thank you.",
    "Great.",
    "Ok, sounds good.",
    "Can you summarise what we discussed?",
    "Never mind, forget that question.",
    "Let's continue tomorrow.",
    "Hi again.",
    "What was I saying?",
    "Good morning!",
)

ASSISTANT_REPLIES = (
    "Noted.",
    "Got it, I'll remember that.",
    "Thanks for the update.",
    "Understood.",
    "Okay, saved.",
    "I've added that to your notes.",
    "Sure thing.",
    "Thanks, that's helpful to know.",
)

# How a user wraps a fact in a turn; ``{s}`` is the fact's sentence.
WRAPPERS = (
    "{s}",
    "{s}",
    "Quick update: {s}",
    "FYI: {s}",
    "By the way. {s}",
    "Oh, and one more thing. {s}",
    "Something to remember: {s}",
    "News about my {relation} {first}: {s}",
    "Please remember this. {s}",
    "Heads up. {s}",
)
