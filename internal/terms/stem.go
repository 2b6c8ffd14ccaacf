package terms

import (
	"hash/maphash"
	"sync"

	"github.com/kljensen/snowball/english"
)

// Words are stemmed with the Snowball English stemmer (Porter2), so that
// "parsing", "parsed" and "parses" all index as "pars". Irregular forms,
// which no suffix rule reaches, are first mapped to their base form (see
// irregular): "bought" indexes as "buy", "children" as "child". Only words
// of 3 to maxStemBytes ASCII letters are stemmed: digits, identifiers'
// wholes and other scripts are kept as they are.
const maxStemBytes = 32

// Version numbers the way terms are made. It changes whenever a word's
// terms do, so that what was built from the old terms (the full-text
// index and the entries' term sets, by a store migration that runs
// sqlite's rebuildTerms and buildEntryTerms; the corpus embedding model,
// by retraining) is known to be stale.
//
//	1  Snowball stems, stop words
//	2  irregular forms mapped to their base form
//	3  "many" and "much" are stop words (query and corpus model terms only)
const Version = 3

// Stemming costs about 0.7 µs a word and words repeat a great deal, so
// stems are cached: a set of shards, each a map under its own lock,
// cleared when it grows past stemShardMax.
const (
	stemShards   = 32
	stemShardMax = 1 << 14
)

type stemShard struct {
	mu sync.RWMutex // guards m
	m  map[string]string
}

var (
	stemCache [stemShards]stemShard
	stemSeed  = maphash.MakeSeed()
)

// stem returns the stem of a lower-case word, or false if the word is not
// one that is stemmed or stems to itself.
func stem(w []byte) (string, bool) {
	if len(w) < 3 || len(w) > maxStemBytes {
		return "", false
	}
	for _, c := range w {
		if c < 'a' || c > 'z' {
			return "", false
		}
	}
	sh := &stemCache[maphash.Bytes(stemSeed, w)%stemShards]
	sh.mu.RLock()
	st, ok := sh.m[string(w)]
	sh.mu.RUnlock()
	if !ok {
		word := string(w)
		if base, ok := irregular[word]; ok {
			st = english.Stem(base, true)
		} else {
			st = english.Stem(word, true)
		}
		sh.mu.Lock()
		if sh.m == nil || len(sh.m) >= stemShardMax {
			sh.m = make(map[string]string, 1024)
		}
		sh.m[word] = st
		sh.mu.Unlock()
	}
	return st, len(st) != len(w) || st != string(w)
}

// irregular maps the irregular past tenses and participles of common
// English verbs, and a few irregular plurals, to their base form: "What
// did I buy?" must find "I bought an air fryer". Forms that are more often
// another word are left out: "sat" (the SAT), "led" (LEDs), "shot" (a flu
// shot), "fed" (the Fed), "bore", "left", "lay", "lit", "rose", "wound".
// Same-form verbs (put, set, read) need no entry.
var irregular = map[string]string{
	"arisen":     "arise",
	"arose":      "arise",
	"ate":        "eat",
	"awoke":      "awake",
	"awoken":     "awake",
	"beaten":     "beat",
	"became":     "become",
	"began":      "begin",
	"begun":      "begin",
	"bent":       "bend",
	"bitten":     "bite",
	"bled":       "bleed",
	"blew":       "blow",
	"blown":      "blow",
	"bought":     "buy",
	"bred":       "breed",
	"broke":      "break",
	"broken":     "break",
	"brought":    "bring",
	"built":      "build",
	"burnt":      "burn",
	"came":       "come",
	"caught":     "catch",
	"children":   "child",
	"chose":      "choose",
	"chosen":     "choose",
	"clung":      "cling",
	"crept":      "creep",
	"dealt":      "deal",
	"drank":      "drink",
	"drawn":      "draw",
	"dreamt":     "dream",
	"drew":       "draw",
	"driven":     "drive",
	"drove":      "drive",
	"drunk":      "drink",
	"dug":        "dig",
	"eaten":      "eat",
	"fallen":     "fall",
	"feet":       "foot",
	"fell":       "fall",
	"felt":       "feel",
	"fled":       "flee",
	"flew":       "fly",
	"flown":      "fly",
	"forbade":    "forbid",
	"forbidden":  "forbid",
	"forgave":    "forgive",
	"forgiven":   "forgive",
	"forgot":     "forget",
	"forgotten":  "forget",
	"fought":     "fight",
	"found":      "find",
	"froze":      "freeze",
	"frozen":     "freeze",
	"gave":       "give",
	"geese":      "goose",
	"given":      "give",
	"gone":       "go",
	"got":        "get",
	"gotten":     "get",
	"grew":       "grow",
	"grown":      "grow",
	"heard":      "hear",
	"held":       "hold",
	"hid":        "hide",
	"hidden":     "hide",
	"hung":       "hang",
	"kept":       "keep",
	"knelt":      "kneel",
	"knew":       "know",
	"known":      "know",
	"leant":      "lean",
	"leapt":      "leap",
	"learnt":     "learn",
	"lent":       "lend",
	"lost":       "lose",
	"made":       "make",
	"meant":      "mean",
	"men":        "man",
	"met":        "meet",
	"mice":       "mouse",
	"mistaken":   "mistake",
	"mistook":    "mistake",
	"overcame":   "overcome",
	"paid":       "pay",
	"proven":     "prove",
	"ran":        "run",
	"rang":       "ring",
	"ridden":     "ride",
	"risen":      "rise",
	"rode":       "ride",
	"rung":       "ring",
	"said":       "say",
	"sang":       "sing",
	"sank":       "sink",
	"saw":        "see",
	"seen":       "see",
	"sent":       "send",
	"sewn":       "sew",
	"shaken":     "shake",
	"shone":      "shine",
	"shook":      "shake",
	"shown":      "show",
	"shrank":     "shrink",
	"shrunk":     "shrink",
	"slept":      "sleep",
	"slid":       "slide",
	"slung":      "sling",
	"sold":       "sell",
	"sought":     "seek",
	"spat":       "spit",
	"sped":       "speed",
	"spent":      "spend",
	"spoken":     "speak",
	"sprang":     "spring",
	"sprung":     "spring",
	"spun":       "spin",
	"stank":      "stink",
	"stolen":     "steal",
	"stood":      "stand",
	"stricken":   "strike",
	"striven":    "strive",
	"strove":     "strive",
	"struck":     "strike",
	"stuck":      "stick",
	"stung":      "sting",
	"stunk":      "stink",
	"sung":       "sing",
	"sunk":       "sink",
	"swam":       "swim",
	"swept":      "sweep",
	"swore":      "swear",
	"sworn":      "swear",
	"swum":       "swim",
	"swung":      "swing",
	"taken":      "take",
	"taught":     "teach",
	"teeth":      "tooth",
	"thought":    "think",
	"threw":      "throw",
	"thrown":     "throw",
	"told":       "tell",
	"took":       "take",
	"tore":       "tear",
	"torn":       "tear",
	"trod":       "tread",
	"trodden":    "tread",
	"understood": "understand",
	"undertaken": "undertake",
	"undertook":  "undertake",
	"went":       "go",
	"wept":       "weep",
	"withdrawn":  "withdraw",
	"withdrew":   "withdraw",
	"woke":       "wake",
	"woken":      "wake",
	"women":      "woman",
	"won":        "win",
	"wore":       "wear",
	"worn":       "wear",
	"wove":       "weave",
	"woven":      "weave",
	"written":    "write",
	"wrote":      "write",
}
